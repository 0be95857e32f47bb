"""`manage.py register_model_version PROJECT DIR`: add a `save_pretrained` directory as a model version."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotate import tooling
from annotate.models import Project


class Command(BaseCommand):
    help = (
        "Load a tool saved with save_pretrained from DIR (strictly, by its registered name), check it is the "
        "project's tool and serves its mode, and store it as a new model version under the artifact directory."
    )

    def add_arguments(self, parser):
        parser.add_argument("project", help="The project's slug.")
        parser.add_argument("directory", type=Path, help="A directory holding tool.json and the weights.")
        parser.add_argument("--label", default="", help="A name for the version.")
        parser.add_argument("--untrained", action="store_true", help="Label its predictions as untrained.")
        parser.add_argument("--make-current", action="store_true", help="Predict new items with it.")

    def handle(self, *args, project: str, directory: Path, label: str, untrained: bool, make_current: bool,
               **options) -> None:
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"no project with slug {project!r}")
        try:
            version = tooling.register_version(target, directory, label=label, trained=not untrained)
        except (ValueError, OSError) as exc:
            raise CommandError(str(exc)) from exc
        if make_current:
            target.current_version = version
            target.save(update_fields=["current_version"])
        self.stdout.write(f"Model version {version.pk} ({version.label}) stored at {version.directory}"
                          + (" and made current" if make_current else ""))
