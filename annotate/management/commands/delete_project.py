"""`manage.py delete_project SLUG [--yes]`: what goes with a project, and (with --yes) deleting it.

The same deletion as the settings page's Delete project (`annotate.deletion`), without a web request's time
limit: a project of 100,000 items with predictions and 200,000 answers took 9 s here, so one several times that
size may outlast a proxy's timeout in the browser.
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from annotate import deletion
from annotate.models import Project


class Command(BaseCommand):
    help = "Show how many rows of each kind go with project SLUG; with --yes, delete it, its rows and its files."

    def add_arguments(self, parser):
        parser.add_argument("project", help="The project's slug.")
        parser.add_argument("--yes", action="store_true", help="Delete it (without: only show what would go).")

    def handle(self, *args, project: str, yes: bool, **options) -> None:
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"no project with slug {project!r}")
        busy = deletion.blockers(target)
        if busy:
            raise CommandError(str(deletion.ProjectBusy(target, busy)))
        if not yes:
            self.stdout.write(f"Deleting {target.name} would remove {deletion.counted(deletion.summary(target))}, "
                              "and their files. Run again with --yes to delete it.")
            return
        begin = time.perf_counter()
        try:
            deleted = deletion.delete_project(target)
        except deletion.ProjectBusy as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Deleted {target.name} with {deleted} ({deleted.directories} artifact "
                          f"director{'y' if deleted.directories == 1 else 'ies'}) "
                          f"in {time.perf_counter() - begin:.1f} s.")
