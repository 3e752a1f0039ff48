"""The admin, where deliveries can be inspected and requeued, and the metrics."""

from django.contrib import admin
from django.urls import path

from django_outbox.metrics.views import metrics

urlpatterns = [path("admin/", admin.site.urls), path("outbox/metrics", metrics)]
