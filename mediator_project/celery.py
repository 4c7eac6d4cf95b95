"""The Celery app and the whole beat schedule, in one place (STYLE §11).

Broker: Redis when CELERY_BROKER_URL or REDIS_URL is set; otherwise a serverless filesystem
broker under var/ so the embedded default runs a worker with beat and no server.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")

app = Celery("mediator")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# name -> {"task": dotted task name, "schedule": seconds or crontab, ...}; each entry says why.
app.conf.beat_schedule = {}
