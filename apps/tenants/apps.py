from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    verbose_name = "Hosted mediators"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from .models import Tenant, TenantDomain
        from .selectors import tenant_cache_clear

        for model in (Tenant, TenantDomain):
            post_save.connect(tenant_cache_clear, sender=model, dispatch_uid=f"tenant-cache-{model.__name__}-save")
            post_delete.connect(tenant_cache_clear, sender=model, dispatch_uid=f"tenant-cache-{model.__name__}-delete")
