from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The operator surfaces that span apps: the tenant pages of the admin (both protocols on one
    page), the console's sidebar and home page, the operator API under /api/v1/ and the operations
    behind them. The top of the stack: it may import any app, and no app imports it. The admin
    pages keep their models' app labels (/admin/tenants/tenant/)."""

    name = "apps.console"
    label = "console"
    verbose_name = "Operator console"
