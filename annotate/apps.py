from __future__ import annotations

from django.apps import AppConfig


class AnnotateConfig(AppConfig):
    name = "annotate"
    verbose_name = "Annotate"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
