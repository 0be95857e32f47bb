from __future__ import annotations

from django.apps import AppConfig


class TrainingjobsConfig(AppConfig):
    name = "trainingjobs"
    verbose_name = "Training jobs"
    default_auto_field = "django.db.models.BigAutoField"
