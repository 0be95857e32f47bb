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
