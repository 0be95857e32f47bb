"""`manage.py import_items PROJECT FILE`: import a JSONL file of `{"inputs": ...}` lines, all or nothing."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotate import imports
from annotate.models import Project


class Command(BaseCommand):
    help = (
        "Import items into a project from a JSONL file (one {\"inputs\": ...} object per line). Every line is "
        "validated first; on any error nothing is imported and the errors are listed with their line numbers. "
        "Predictions are queued for the Celery worker unless --no-predict."
    )

    def add_arguments(self, parser):
        parser.add_argument("project", help="The project's slug.")
        parser.add_argument("file", type=Path, help="The JSONL file ('-' is not supported: give a path).")
        parser.add_argument("--no-predict", action="store_true", help="Import without queueing predictions.")
        parser.add_argument("--max-bytes", type=int, default=None,
                            help="Size limit in bytes (default: TC_IMPORT_MAX_BYTES, 64 MiB).")

    def handle(self, *args, project: str, file: Path, no_predict: bool, max_bytes: int | None, **options) -> None:
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"no project with slug {project!r}")
        try:
            with file.open("rb") as stream:
                result = imports.import_jsonl(target, stream, max_bytes=max_bytes, predict=not no_predict)
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror or exc}") from exc
        except imports.ImportRejected as exc:
            for error in exc.errors:
                self.stderr.write(f"{file}: {error}")
            if exc.total > len(exc.errors):
                self.stderr.write(f"... and {exc.total - len(exc.errors)} more errors")
            raise CommandError(f"nothing imported: {exc.total} error(s) in {file}") from exc
        self.stdout.write(
            f"Imported {result.count} items into {target.slug}; "
            f"{result.prediction_batches} prediction batches queued."
        )
