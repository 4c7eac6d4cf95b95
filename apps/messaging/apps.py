from django.apps import AppConfig


class MessagingConfig(AppConfig):
    name = "apps.messaging"
    verbose_name = "Messaging"
