"""The operator API's OpenAPI document, finished (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]):
readable operation titles, the error answers every operation can give (Redoc showed generated
ids and Swagger called 400/401/403 "Undocumented"), and what the request serializers enforce
beyond their fields: no undeclared member (apibase.StrictSerializer), and a key rotation that
names at least one key."""

from __future__ import annotations

# operationId → the title Swagger UI and Redoc show.
SUMMARIES = {
    "tenants_list": "List tenants",
    "tenants_create": "Create a tenant",
    "tenants_retrieve": "Read a tenant",
    "tenants_partial_update": "Change a tenant's name, public URL, aliases or policy",
    "tenants_suspend_create": "Suspend a tenant",
    "tenants_resume_create": "Resume a tenant",
    "tenants_rotate_keys_create": "Rotate a tenant's keys",
    "tenants_statistics_retrieve": "A tenant's live figures",
    "tenants_purge_expired_create": "Purge a tenant's expired data (dry run by default)",
    "tenants_rotate_didcomm_identity_create": "Rotate a tenant's DIDComm mediator identity",
    "didcomm_policies_list": "List tenants' DIDComm policies",
    "didcomm_policies_retrieve": "Read a tenant's DIDComm policy",
    "didcomm_policies_partial_update": "Change a tenant's DIDComm policy",
    "push_providers_list": "List a tenant's push providers",
    "push_providers_create": "Add a push provider to a tenant",
    "push_providers_retrieve": "Read a tenant's push provider",
    "push_providers_partial_update": "Change a tenant's push provider (credentials are write-only)",
    "push_providers_destroy": "Remove a tenant's push provider",
    "push_policies_retrieve": "Read a tenant's push policy",
    "push_policies_partial_update": "Change a tenant's push policy",
    "push_devices_retrieve": "Count a tenant's push devices per service",
    "audit_list": "List operator actions (audit log)",
    "audit_retrieve": "Read one audit entry",
    "usage_reports_list": "List usage report runs",
    "usage_reports_create": "Request a usage report run",
    "usage_reports_retrieve": "Read a usage report run",
    "usage_reports_csv_retrieve": "Download a usage report table as CSV",
}

_DETAIL = {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}
_ERRORS = {
    "ValidationErrors": {
        "type": "object",
        "description": "Each member names a field (or `non_field_errors`) and lists its messages; nested "
        "objects (`policy`) map their own fields the same way.",
        "additionalProperties": {"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "object"}]},
        "example": {"domain": ["The primary domain cannot be changed: its did:web follows it. Add an alias instead."]},
    },
    "ErrorDetail": _DETAIL,
}
_ANSWERS = {
    "400": ("Bad input: nothing was changed.", "ValidationErrors"),
    "401": ("No credentials: send `Authorization: Token <key>` (or log into the console).", "ErrorDetail"),
    "403": ("A non-staff user, or a staff user without the model permission this action needs.", "ErrorDetail"),
    "404": ("No such tenant, grant, push provider, report run or audit entry.", "ErrorDetail"),
    "409": (
        "A slug or host another tenant already has, or a push provider kind the tenant already has: "
        "nothing was changed.",
        "ValidationErrors",
    ),
}
# Operations that can name a slug or host already taken (apibase.service_call answers 409).
_CONFLICTS = {"tenants_create", "tenants_partial_update", "push_providers_create"}
# RotateRequest: `{}` and `{"signing": false, "prekey": false}` are refused (RotateSerializer).
_ROTATE_ONE = {
    "anyOf": [
        {"required": [key], "properties": {key: {"type": "boolean", "enum": [True]}}} for key in ("signing", "prekey")
    ]
}


def _answer(code: str) -> dict:
    description, schema = _ANSWERS[code]
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }


def finish_operator_schema(result: dict, generator, request, public) -> dict:
    """Add titles and the 400/401/403/404 (409) answers to every operation of the operator API,
    `additionalProperties: false` to every request body, and RotateRequest's "at least one key"."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(_ERRORS)
    for name, component in schemas.items():
        # Every request body is a StrictSerializer's (tests/console/test_api_contract.py checks it).
        if name.endswith("Request") and component.get("type") == "object":
            component["additionalProperties"] = False
    if "RotateRequest" in schemas:
        schemas["RotateRequest"].update(_ROTATE_ONE)
    for path, operations in result.get("paths", {}).items():
        for operation in operations.values():
            if operation["operationId"] == "tenants_rotate_keys_create":
                operation["requestBody"]["required"] = True
            operation["summary"] = SUMMARIES.get(operation["operationId"], operation.get("summary", ""))
            responses = operation.setdefault("responses", {})
            codes = ["401", "403"]
            if "requestBody" in operation or operation.get("parameters"):
                codes.insert(0, "400")
            if "{" in path:
                codes.append("404")
            if operation["operationId"] in _CONFLICTS:
                codes.append("409")
            for code in codes:
                responses.setdefault(code, _answer(code))
    return result
