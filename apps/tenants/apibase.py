"""What every operator API shares beside its authentication (auth.py) and permissions
(permissions.py): input that names only declared members and has the JSON types the schema
documents, pages of a documented size, identifiers that are 404 when no row can have them, one
400 shape for every bad input (a body that is not JSON included), and a service's validation
error as that 400 (or 409 for a name another tenant already holds). docs/operators.md#operator-api."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.http import Http404
from rest_framework import serializers
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.views import exception_handler

from apps.wire.display import grouped

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as StrOrPromise

# The largest page of every list (`?limit=`; REST_FRAMEWORK["PAGE_SIZE"] when left out) and the
# largest `?offset=`; docs/operators.md#pages says both.
MAX_PAGE_SIZE = 500
MAX_OFFSET = 2**31 - 1
_DIGITS = re.compile(r"[0-9]+")
# Codes of a service's ValidationError messages that mean "already taken", not "malformed".
CONFLICT_CODES = frozenset({"conflict", "unique"})


class Conflict(APIException):
    """409: the name is well formed but another tenant (or row) already holds it; the body is the
    same field → messages map as a 400."""

    status_code = 409
    default_detail = "Conflict."
    default_code = "conflict"

    def __init__(self, detail: dict):
        super().__init__()
        self.detail = ValidationError(detail).detail


def service_call(fn, **kwargs):
    """Run a service; its django ValidationError becomes the API's 400 JSON, or 409 when every
    message in it is a conflict (ValidationError code "conflict")."""
    try:
        return fn(**kwargs)
    except DjangoValidationError as exc:
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        if all(e.code in CONFLICT_CODES for e in _leaves(exc)):
            raise Conflict(detail) from exc
        raise ValidationError(detail) from exc


def _leaves(exc: DjangoValidationError) -> list[DjangoValidationError]:
    if hasattr(exc, "error_dict"):
        return [leaf for errors in exc.error_dict.values() for e in errors for leaf in _leaves(e)]
    if hasattr(exc, "error_list") and exc.error_list != [exc]:
        return [leaf for e in exc.error_list for leaf in _leaves(e)]
    return [exc]


def operator_exception_handler(exc, context):
    """DRF's handler, with a body that is not JSON (ParseError) answered in the one 400 shape:
    `{"non_field_errors": [message]}` rather than DRF's `{"detail": message}`."""
    if isinstance(exc, ParseError):
        exc = ValidationError({"non_field_errors": [str(exc.detail)]})
    return exception_handler(exc, context)


def pk_or_404(model: type[models.Model], value) -> int:
    """A path's integer id, or 404 when it is not digits or beyond what the model's key can hold
    (PostgreSQL would refuse the query: a 500)."""
    text = str(value)
    limit = 2**63 - 1 if isinstance(model._meta.pk, models.BigAutoField) else 2**31 - 1
    if not _DIGITS.fullmatch(text) or not 0 < int(text) <= limit:
        raise Http404(f"No {model._meta.object_name} matches the given query.")  # get_object_or_404's words
    return int(text)


def _bounded(request, name: str, default: int | None, lo: int, hi: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not _DIGITS.fullmatch(raw) or not lo <= int(raw) <= hi:
        raise ValidationError({name: [f"Must be an integer between {grouped(lo)} and {grouped(hi)}."]})
    return int(raw)


class OperatorPagination(LimitOffsetPagination):
    """`?limit=` (1 to MAX_PAGE_SIZE, default REST_FRAMEWORK["PAGE_SIZE"]) and `?offset=` (0 to
    MAX_OFFSET); anything else is a 400 naming the parameter, rather than DRF's silent default or a
    database error."""

    max_limit = MAX_PAGE_SIZE

    def get_limit(self, request):
        return _bounded(request, self.limit_query_param, self.default_limit, 1, self.max_limit)

    def get_offset(self, request):
        return _bounded(request, self.offset_query_param, 0, 0, MAX_OFFSET)

    def get_schema_operation_parameters(self, view):
        params = super().get_schema_operation_parameters(view)
        bounds = {self.limit_query_param: (1, self.max_limit), self.offset_query_param: (0, MAX_OFFSET)}
        for param in params:
            lo, hi = bounds[param["name"]]
            param["schema"] = {"type": "integer", "minimum": lo, "maximum": hi}
            if param["name"] == self.limit_query_param:
                param["description"] = (
                    f"Number of results per page: 1 to {self.max_limit}, {self.default_limit} by default."
                )
        return params


class _JsonTyped:
    """A field that takes only the JSON type the schema documents for it (DRF would also take
    `0` for false, `"5"` for 5 and `5` for "5")."""

    json_types: tuple[type, ...] = ()
    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "type": serializers.CharField.default_error_messages["invalid"]
    }

    def to_internal_value(self, data):
        if isinstance(data, bool) is not (bool in self.json_types) or not isinstance(data, self.json_types):
            self.fail("type")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class BooleanField(_JsonTyped, serializers.BooleanField):
    json_types = (bool,)
    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "type": serializers.BooleanField.default_error_messages["invalid"]
    }


class IntegerField(_JsonTyped, serializers.IntegerField):
    json_types = (int,)
    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "type": serializers.IntegerField.default_error_messages["invalid"]
    }


class CharField(_JsonTyped, serializers.CharField):
    json_types = (str,)


class SlugField(_JsonTyped, serializers.SlugField):
    json_types = (str,)


class URLField(_JsonTyped, serializers.URLField):
    json_types = (str,)


class DateField(_JsonTyped, serializers.DateField):
    json_types = (str,)


class ChoiceField(_JsonTyped, serializers.ChoiceField):
    json_types = (str,)


class PatternField(CharField):
    """A string that `pattern` (ECMA-262 and Python alike, no anchors) matches in full; the schema
    documents it as `^pattern$`. `message(value)` says what is wrong. Whitespace is not trimmed:
    the schema's pattern is the whole rule."""

    def __init__(self, *, pattern: str, message, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self._full = re.compile(pattern)
        self._message = message
        # Read by drf-spectacular for the schema's `pattern`; the full match below decides.
        self.validators.append(RegexValidator(f"^{pattern}$"))

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not self._full.fullmatch(value):
            raise ValidationError(self._message(value))
        return value


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


class StrictModelSerializer(StrictSerializer, serializers.ModelSerializer):
    """A ModelSerializer whose generated fields take only their JSON types, as above."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.BooleanField: BooleanField,
        models.IntegerField: IntegerField,
        models.PositiveIntegerField: IntegerField,
        models.PositiveSmallIntegerField: IntegerField,
        models.SmallIntegerField: IntegerField,
        models.BigIntegerField: IntegerField,
        models.CharField: CharField,
        models.TextField: CharField,
        models.SlugField: SlugField,
        models.URLField: URLField,
        models.DateField: DateField,
    }
    serializer_choice_field = ChoiceField
