"""The model permission each report-run action needs, for the console ("Generate usage report"), the
staff pages under /dashboard/ and the API (/api/v1/usage/) alike; checked by
apps.tenants.permissions (docs/operators.md)."""

REPORT_RUN_ACTIONS = {
    "dashboard": "view",  # the staff dashboard: published report figures and live counters
    "list": "view",
    "retrieve": "view",
    "csv": "view",
    "request": "add",
    "cancel": "add",  # whoever may start a run may stop one
}
