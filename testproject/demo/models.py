"""What the demo's signal receivers saw, so that tests can read it from another process."""

from django.db import models


class SignalLog(models.Model):
    """One django_outbox signal as a receiver got it."""

    signal = models.CharField(max_length=20)
    delivery_id = models.BigIntegerField()
    inbox = models.CharField(max_length=2048)
    actor = models.CharField(max_length=2048)
    status = models.IntegerField(null=True)
    error = models.TextField(blank=True)
    tag = models.CharField(max_length=200, blank=True)
    outcome = models.CharField(max_length=20, blank=True)
    deadline = models.BooleanField(null=True)
    held = models.BooleanField(null=True)
    amount_msat = models.BigIntegerField(null=True)

    def __str__(self) -> str:
        return f"{self.signal} {self.inbox}"
