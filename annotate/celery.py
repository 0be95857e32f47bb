"""The Celery app. Its configuration is the `CELERY_*` block of the Django settings."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")

app = Celery("annotate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
