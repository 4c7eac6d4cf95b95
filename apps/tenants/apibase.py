"""What every operator API shares beside its authentication (auth.py) and permissions
(permissions.py): input that names only declared members, and a service's validation error as
DRF's 400 JSON."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers
from rest_framework.exceptions import ValidationError


def service_call(fn, **kwargs):
    """Run a service; its django ValidationError becomes DRF's 400 JSON."""
    try:
        return fn(**kwargs)
    except DjangoValidationError as exc:
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        raise ValidationError(detail) from exc


class StrictSerializer(serializers.Serializer):
    """Rejects members it does not declare, so a typo is an error rather than a silent no-op.
    `fixed` names members that exist but cannot be sent here, each with the reason."""

    fixed: dict[str, str] = {}

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise ValidationError({name: [self.fixed.get(name, "Unknown field.")] for name in unknown})
        return super().to_internal_value(data)
