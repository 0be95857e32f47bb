"""tensorcode annotate: the Django project package and the reviewer app."""

from __future__ import annotations

# Import the Celery app whenever Django starts, so `delay_on_commit` in any app uses this configuration.
from .celery import app as celery_app

__all__ = ["celery_app"]
