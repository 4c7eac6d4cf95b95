"""The push app's receivers of messaging's announcements (apps/messaging/notify.py)."""

from __future__ import annotations

from apps.messaging import notify

from . import sender, services, tasks


def on_wake_requested(
    signal_sender=None, *, tenant_id: int, subject: str, due: bool, even_if_live: bool = False, **kwargs
) -> None:
    """A message was stored for a sleeping subject with a device: claim its wake and queue it."""
    delay = sender.wake_claim(tenant_id=tenant_id, subject=subject, due=due, even_if_live=even_if_live)
    if delay is not None:
        tasks.queue_wake(tenant_id=tenant_id, subject=subject, countdown=delay)


def on_registrations_ended(signal_sender=None, *, tenant_id: int, dids: list[str], **kwargs) -> None:
    """Decentrl identities are no longer registered: their devices go."""
    services.devices_forget(tenant_id=tenant_id, subjects=[services.subject_for_did(did) for did in dids])


def connect() -> None:
    notify.wake_requested.connect(on_wake_requested, dispatch_uid="push.wake_requested")
    notify.registrations_ended.connect(on_registrations_ended, dispatch_uid="push.registrations_ended")
