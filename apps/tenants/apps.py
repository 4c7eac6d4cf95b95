from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    verbose_name = "Hosted mediators"
