from django.apps import AppConfig


class ProtocolConfig(AppConfig):
    name = "apps.protocol"
    verbose_name = "Protocol"
