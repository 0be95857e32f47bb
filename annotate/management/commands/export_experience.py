"""`manage.py export_experience PROJECT`: experience files (and a flat JSONL) of a project's reviewed answers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotate import export as exports
from annotate.models import ExportFormat, Project


class Command(BaseCommand):
    help = (
        "Export a project's reviewed answers as experience files (one per minibatch, loadable with "
        "tensorcode.training.load_experience and the project's tool) plus answers.jsonl and manifest.json, "
        "under the artifact directory exports/<id>/. Runs here unless --queue hands it to a Celery worker."
    )

    def add_arguments(self, parser):
        parser.add_argument("project", help="The project's slug.")
        parser.add_argument("--format", choices=ExportFormat.values, default=ExportFormat.EXPERIENCE)
        parser.add_argument("--minibatch-size", type=int, default=32, help="Examples per experience file.")
        parser.add_argument("--reviewer", action="append", default=[], help="Only this reviewer's answers "
                            "(repeat for several).")
        parser.add_argument("--filters", default=None, help='More filters as JSON, e.g. \'{"confidence_max": 0.5}\'.')
        parser.add_argument("--copy-to", type=Path, default=None, help="Also copy the export's files to this "
                            "directory (created; must be empty or absent).")
        parser.add_argument("--queue", action="store_true", help="Queue the export for a worker and return.")

    def handle(self, *args, project: str, format: str, minibatch_size: int, reviewer: list[str],
               filters: str | None, copy_to: Path | None, queue: bool, **options) -> None:
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"no project with slug {project!r}")
        try:
            chosen = json.loads(filters) if filters else {}
        except ValueError as exc:
            raise CommandError(f"--filters is not valid JSON: {exc}") from exc
        if reviewer and isinstance(chosen, dict):
            chosen["reviewers"] = reviewer
        try:
            export = exports.create_export(target, None, filters=chosen, minibatch_size=minibatch_size,
                                           format=format, enqueue=queue)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if queue:
            self.stdout.write(f"Export {export.pk} queued ({export.total} answers).")
            return
        export = exports.run(export)
        self.stdout.write(f"Export {export.pk}: {export.done} answers in {len(export.files)} files at "
                          f"{export.directory}")
        if copy_to is not None:
            if copy_to.exists() and any(copy_to.iterdir()):
                raise CommandError(f"{copy_to} is not empty; choose an empty or new directory")
            copy_to.mkdir(parents=True, exist_ok=True)
            for name in export.files:
                shutil.copy2(export.directory / name, copy_to / name)
            self.stdout.write(f"Copied to {copy_to}")
