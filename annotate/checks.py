"""System checks for the site's configuration (`manage.py check`)."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.files)
def check_artifact_dir(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """annotate.E001: checkpoints and experience files need a writable `TC_ARTIFACT_DIR`."""
    path = Path(settings.TC_ARTIFACT_DIR)
    if path.is_dir() and os.access(path, os.W_OK | os.X_OK):
        return []
    return [
        checks.Error(
            f"The artifact directory {str(path)!r} is not a writable directory.",
            hint="Create it with write permission for this user, or set TC_ARTIFACT_DIR to one that is.",
            id="annotate.E001",
        )
    ]


@checks.register(checks.Tags.caches, deploy=True)
def check_shared_cache(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """annotate.W001 (`check --deploy`): without `TC_CACHE_URL` each process keeps its own cache, so a site of
    several processes counts failed sign-ins and password-reset mails per process (an attacker gets the limit
    once per process) and each process counts progress and agreement afresh."""
    if settings.TC_CACHE_URL:
        return []
    return [
        checks.Warning(
            "TC_CACHE_URL is not set: the cache is per process, so sign-in and password-reset limits count in "
            "each web process apart.",
            hint="Set TC_CACHE_URL to the deployment's Redis, e.g. redis://redis.internal:6379/1.",
            id="annotate.W001",
        )
    ]
