"""The outbox's admin: an operator's console, in the Django admin's own look.

Deliveries (:mod:`~django_outbox.admin.deliveries`, with the overview), messages
(:mod:`~django_outbox.admin.messages`), hosts, their pages and the open breakers
(:mod:`~django_outbox.admin.hosts`), webhook endpoints
(:mod:`~django_outbox.admin.endpoints`), and the pages of the active extensions.
Nothing is edited by hand: requeue, give up and reset call the package's own
functions, after a confirmation page where they change many rows, and each is
written to the admin's log.  Every page needs a django_outbox view permission;
acting needs the matching change permission.
"""

from __future__ import annotations

from django.contrib import admin

from django_outbox.admin.deliveries import DeliveryAdmin
from django_outbox.admin.endpoints import EndpointAdmin
from django_outbox.admin.hosts import HostAdmin, HostPauseAdmin
from django_outbox.admin.messages import MessageAdmin
from django_outbox.extensions.registry import active
from django_outbox.models import Delivery, Endpoint, Host, HostPause, Message

admin.site.register(Delivery, DeliveryAdmin)
admin.site.register(Message, MessageAdmin)
admin.site.register(Host, HostAdmin)
admin.site.register(HostPause, HostPauseAdmin)
admin.site.register(Endpoint, EndpointAdmin)
for extension in active():
    extension.register_admin(admin.site)
