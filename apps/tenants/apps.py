from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    verbose_name = "Hosted mediators"

    def ready(self) -> None:
        from .models import Tenant, TenantDomain
        from .selectors import HOSTS

        HOSTS.clear_on_change(Tenant, TenantDomain)
