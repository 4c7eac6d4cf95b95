"""The push providers by kind (base.PROVIDERS): each module registers its one provider when
imported (docs/push.md, "Providers")."""

from __future__ import annotations

from . import apns, fcm, webhook, webpush
from .base import PROVIDERS

__all__ = ["PROVIDERS", "apns", "fcm", "webhook", "webpush"]
