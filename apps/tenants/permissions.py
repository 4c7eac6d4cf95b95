"""Which Django model permission an operator action needs: one table per model, read by the console
(the admin's pages, actions and buttons) and by the operator API (`OperatorPermissions`), so that
the two always agree (docs/operators.md#permissions).

A table maps an action to Django's permission verb on the model: "view", "add", "change" or
"delete". A user needs `is_staff` and `<app>.<verb>_<model>` (a superuser has every permission).
"""

from __future__ import annotations

from django.contrib.auth import get_permission_codename
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Model
from rest_framework.permissions import BasePermission

# Tenant actions, named as the API's viewset actions. The console: changelist = list, the change
# page with its live figures = retrieve and statistics, the add form = create, saving the change
# form = partial_update; its buttons and bulk actions carry the same names.
TENANT_ACTIONS = {
    "list": "view",
    "retrieve": "view",
    "statistics": "view",
    "registrations": "view",
    "contracts": "view",
    "create": "add",
    "partial_update": "change",
    "suspend": "change",
    "resume": "change",
    "rotate_keys": "change",
    "rotate_didcomm": "change",  # the tenant's DIDComm mediator DID (apps/didcomm), a key rotation too
    "purge_expired": "change",
}
# The audit log is read-only everywhere.
AUDIT_ACTIONS = {"list": "view", "retrieve": "view"}


# A request no route handles (no viewset action, or a method a plain APIView does not list) needs
# the verb of its method, so that a user without it gets 403 before the 405; OPTIONS needs staff only.
METHOD_VERBS = {"GET": "view", "HEAD": "view", "POST": "add", "PUT": "change", "PATCH": "change", "DELETE": "delete"}


def permission_name(model: type[Model], verb: str) -> str:
    """`<app_label>.<verb>_<model_name>`, as `User.has_perm` takes it."""
    return f"{model._meta.app_label}.{get_permission_codename(verb, model._meta)}"


def operator_may(user, model: type[Model], verb: str) -> bool:
    """A staff user holding the model permission `verb`; as in the admin, `change` implies `view`."""
    if not (user and user.is_active and user.is_staff):
        return False
    verbs = ("view", "change") if verb == "view" else (verb,)
    return any(user.has_perm(permission_name(model, v)) for v in verbs)


class OperatorPermissions(BasePermission):
    """The API's permission class (the default under /api/v1/): what `operator_may` says for the
    verb the view's `operator_actions` table names.

    The table is keyed by the viewset action, or on a plain APIView by the HTTP method (HEAD as
    GET). This is DjangoModelPermissions with GET needing `view` and with custom actions mapped,
    through the same tables the console reads. An action missing from a table is a programming
    error (tests/console/test_permissions.py walks every route).
    """

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated and user.is_staff):
            return False  # 401 without credentials, 403 for a non-staff user
        table = getattr(view, "operator_actions", None)
        if table is None:
            raise ImproperlyConfigured(f"{type(view).__name__} has no operator_actions table")
        if hasattr(view, "action_map"):
            key = None if view.action == "metadata" else view.action  # OPTIONS on a viewset
        else:
            key = "GET" if request.method == "HEAD" else request.method
            key = key if key in table else None
        if key is None:
            verb = METHOD_VERBS.get(request.method)
        elif key in table:
            verb = table[key]
        else:
            raise ImproperlyConfigured(f"{type(view).__name__}.operator_actions has no entry for {key!r}")
        if verb is None:
            return True
        queryset = view.get_queryset() if hasattr(view, "get_queryset") else view.queryset
        return operator_may(user, queryset.model, verb)
