"""The metrics endpoint, for the project's ``urls.py``::

    from django_outbox.metrics.views import metrics

    urlpatterns = [..., path("outbox/metrics", metrics)]

It serves only the outbox's metrics.  Projects using ``django-prometheus``
need not mount it: the collector is registered with ``prometheus_client``'s
default registry, which their ``/metrics`` serves.  Protect it as any internal
endpoint (network rules, or wrap the view in an authentication check).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from django_outbox.metrics.prometheus import exposition


def metrics(request: HttpRequest) -> HttpResponse:
    """The outbox's metrics in Prometheus's text format (501 without prometheus-client)."""
    page = exposition()
    if page is None:
        return HttpResponse(
            "prometheus-client is not installed: pip install 'django-outbox[metrics]'\n",
            status=501,
            content_type="text/plain",
        )
    body, content_type = page
    return HttpResponse(body, content_type=content_type)
