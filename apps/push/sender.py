"""Sending a claimed wake and applying each provider's answer (docs/push.md, "Sending and failures").

For each device of the subject: the tenant's enabled provider of the device's service, else its
enabled webhook provider (the operator's own gateway), else nothing (`no_provider`). The answer:

- `sent`: the device's `last_woken_at`, the provider's state `ok`;
- `dead_token`: the device is deleted (only on this answer, and only if its token is still the one
  sent: a re-registration meanwhile keeps the new one);
- `retry`: the same device again after the provider's Retry-After, else `PUSH_RETRY_BASE_S * 2^n`
  with jitter, at most `PUSH_RETRY_CAP_S`, for `PUSH_RETRY_MAX_ATTEMPTS` attempts; the provider's
  state `failing` meanwhile. A retry whose subject picked up since sends nothing;
- `failed`: our payload or credentials; the device stays, the provider's state `failing` with
  the reason.

A wake that reached no device (all failed, gave up or had no provider) is given back (wake.release),
so the subject's next stored message claims again. Nothing here is on the store's path: a provider
down or slow only delays wakes; the messages are stored and fetched as always.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from apps.messaging import wake
from apps.ops import metrics
from apps.ops.logconfig import code_path

from . import services
from .models import Device, PushProvider
from .providers import PROVIDERS
from .providers.base import Result, Wake

log = logging.getLogger("mediator.push")


@dataclass(frozen=True)
class Retry:
    """One device's send to try again in `delay_s` seconds (attempt `attempt`, counted from 0)."""

    device_id: int
    subject: str
    attempt: int
    delay_s: float


@dataclass
class Sent:
    """What a wake task did: a one-line summary and the retries to queue."""

    sent: int = 0
    retries: list[Retry] = field(default_factory=list)
    summary: str = ""


def _now_s() -> int:
    return int(time.time())


def wake_claim(*, tenant_id: int, subject: str, due: bool, even_if_live: bool = False) -> int | None:
    """A store announced a wake (messaging.notify.wake_requested): claim it, no earlier than the
    tenant's wake interval after the last one; the seconds until it may leave, or None when it was
    coalesced (counted)."""
    delay = None
    if due:
        try:
            delay = wake.claim(
                tenant_id=tenant_id,
                subject=subject,
                now_s=_now_s(),
                interval_s=services.choices_of(tenant_id=tenant_id).wake_interval_s,
                even_if_live=even_if_live,
            )
        except DatabaseError as exc:
            # After the store's commit: a failed claim loses this wake, never the message.
            log.warning("push wake not claimed", extra={"reason": type(exc).__name__})
            return None
    if delay is None:
        metrics.PUSH_COALESCED.inc()
    return delay


def wake_given_back(*, tenant_id: int, subject: str) -> None:
    """The claimed wake reached no device: the next stored message may claim it again."""
    try:
        wake.release(tenant_id=tenant_id, subject=subject)
    except DatabaseError as exc:
        log.warning("push wake not given back", extra={"reason": type(exc).__name__})


def backoff_s(attempt: int, retry_after_s: float | None) -> float:
    """The delay before attempt `attempt + 1`: the provider's Retry-After when it gave one, else
    exponential with jitter (half to all of base * 2^attempt), at most PUSH_RETRY_CAP_S."""
    if retry_after_s is not None:
        return max(float(retry_after_s), 0.0)
    ceiling = min(float(settings.PUSH_RETRY_CAP_S), float(settings.PUSH_RETRY_BASE_S) * (2**attempt))
    return ceiling / 2 + random.random() * ceiling / 2  # noqa: S311 - jitter, not a secret


# How long a provider's unchanged state goes unwritten (per process): its state is written when an
# answer changes it, else at most this often, so the provider's row is not rewritten on every send.
STATE_REFRESH_S = 30.0
# provider pk -> (state, last error, time.monotonic() of the write) of this process's last write.
_written: dict[int, tuple[str, str, float]] = {}
_written_lock = threading.Lock()


def _record(provider: PushProvider, result: Result) -> None:
    """The provider's state after an answer (one UPDATE when it changed or STATE_REFRESH_S passed
    since this process wrote it; the reason is a bounded code)."""
    ok = result.outcome in ("sent", "dead_token")
    state = PushProvider.State.OK if ok else PushProvider.State.FAILING
    error = "" if ok else f"{result.outcome}: {result.reason}"[:200]
    at = time.monotonic()
    with _written_lock:
        last = _written.get(provider.pk)
        if last is not None and last[:2] == (state, error) and at - last[2] < STATE_REFRESH_S:
            return
        _written[provider.pk] = (state, error, at)
    now = timezone.now()
    stamp = {"last_success_at": now} if ok else {"last_failure_at": now}
    PushProvider.objects.filter(pk=provider.pk).update(state=state, last_error=error, **stamp)


def _send(senders: services.Senders, device: Device, attempt: int, what: Wake) -> tuple[bool, Retry | None]:
    """One device's send and its answer applied: (woken, the retry to queue if any)."""
    providers = senders.providers
    provider = providers.get(device.service) or providers.get(PushProvider.Kind.WEBHOOK)
    impl = PROVIDERS.get(provider.kind) if provider is not None else None
    if provider is None or impl is None:
        metrics.PUSH_FAILED.labels(device.service, "failed", "no_provider").inc()
        return False, None
    try:
        credentials = provider.credentials()
    except Exception:  # noqa: BLE001 - a wrong deployment key: the provider's state says so
        result = Result("failed", "credentials_unreadable")
    else:
        # What every provider's settings get beside the tenant's own (the webhook's body uses them).
        opts = {
            **(provider.settings or {}),
            "tenant": senders.tenant_slug,
            "service": device.service,
            "platform": device.platform,
        }
        try:
            result = impl.send(credentials, opts, device.token, what)
        except Exception as exc:  # noqa: BLE001 - a provider module's bug must not lose the wake's retries
            log.error("push provider raised", extra={"provider": provider.kind, "code_path": code_path(exc)})
            result = Result("retry", "provider_error")
    _record(provider, result)
    kind = provider.kind
    if result.outcome == "sent":
        metrics.PUSH_SENT.labels(kind).inc()
        Device.objects.filter(pk=device.pk).update(last_woken_at=timezone.now())
        return True, None
    if result.outcome == "dead_token":
        if services.device_prune(tenant_id=device.tenant_id, device_id=device.pk, token=device.token):
            metrics.PUSH_PRUNED.labels(kind).inc()
        return False, None
    metrics.PUSH_FAILED.labels(kind, result.outcome, result.reason or "other").inc()
    if result.outcome == "retry":
        if attempt + 1 < settings.PUSH_RETRY_MAX_ATTEMPTS:
            return False, Retry(device.pk, device.subject, attempt + 1, backoff_s(attempt, result.retry_after_s))
        metrics.PUSH_FAILED.labels(kind, "failed", "gave_up").inc()
    return False, None


def _finish(tenant_id: int, subject: str, done: Sent, what: str) -> Sent:
    if done.sent == 0 and not done.retries:
        wake_given_back(tenant_id=tenant_id, subject=subject)
    done.summary = f"{what}: {done.sent} sent, {len(done.retries)} to retry"
    return done


def wake_send(*, tenant_id: int, subject: str) -> Sent:
    """Send the subject's claimed wake to each of its devices (see the module docstring), unless the
    subject picked up since the claim (a wake the interval delayed: the phone is awake already).
    Its database cost: one read of the devices (with the claim's check), the tenant's providers from
    the per-process cache, one UPDATE per device woken."""
    done = Sent()
    devices = services.devices_to_wake(tenant_id=tenant_id, subject=subject)
    if not devices and not wake.still_woken(tenant_id=tenant_id, subject=subject):
        done.summary = "wake: no longer wanted"
        return done
    senders = services.senders_of(tenant_id=tenant_id)
    if senders is None:
        done.summary = "no tenant"
        return done
    what = services.choices_of(tenant_id=tenant_id).wake
    for device in devices:
        woken, retry = _send(senders, device, 0, what)
        done.sent += woken
        if retry is not None:
            done.retries.append(retry)
    return _finish(tenant_id, subject, done, "wake")


def device_resend(*, tenant_id: int, device_id: int, attempt: int) -> Sent:
    """Retry one device's wake, unless its subject picked up since or the device is gone."""
    done = Sent()
    device = Device.objects.filter(tenant_id=tenant_id, pk=device_id).first()
    senders = services.senders_of(tenant_id=tenant_id)
    if device is None or senders is None or not wake.still_woken(tenant_id=tenant_id, subject=device.subject):
        done.summary = "resend: no longer wanted"
        return done
    what = services.choices_of(tenant_id=tenant_id).wake
    woken, retry = _send(senders, device, attempt, what)
    done.sent += woken
    if retry is not None:
        done.retries.append(retry)
    return _finish(tenant_id, device.subject, done, "resend")
