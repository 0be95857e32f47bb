"""`manage.py launch_training PROJECT`: launch a training job from the shell, as the project page does."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from annotate.models import ModelVersion, Project
from trainingjobs import defaults, runner, services
from trainingjobs.models import DevicePreference, Optimizer, TrainingJob


class Command(BaseCommand):
    help = (
        "Launch a training job for PROJECT (its slug) on its reviewed answers as they are now. The job is queued "
        "for a worker on the `gpu` queue; with --here it is trained in this process instead. Unset settings take "
        "the tool kind's defaults."
    )

    def add_arguments(self, parser):
        parser.add_argument("project", help="The project's slug.")
        parser.add_argument("--base-version", type=int, help="Model version id to start from (default: current).")
        parser.add_argument("--epochs", type=int)
        parser.add_argument("--lr", type=float)
        parser.add_argument("--optimizer", choices=Optimizer.values)
        parser.add_argument("--held-out-fraction", type=float)
        parser.add_argument("--minibatch-size", type=int)
        parser.add_argument("--seed", type=int)
        parser.add_argument("--device", choices=DevicePreference.values)
        parser.add_argument("--checkpoint-interval", type=int)
        parser.add_argument("--reviewer", action="append", default=[], help="Only this reviewer's answers (repeat).")
        parser.add_argument("--include-uploads", action="store_true",
                            help="Also train on the project's accepted experience uploads (never held out).")
        parser.add_argument("--agreed-only", action="store_true",
                            help="Leave out items whose reviewers disagree and that no admin has adjudicated.")
        parser.add_argument("--here", action="store_true", help="Train in this process and wait for the result.")

    def handle(self, *args, project: str, base_version: int | None, here: bool, reviewer: list[str],
               include_uploads: bool, agreed_only: bool, **options):
        found = Project.objects.filter(slug=project).first()
        if found is None:
            raise CommandError(f"no project with slug {project!r}")
        version = (
            ModelVersion.objects.filter(project=found, pk=base_version).first()
            if base_version is not None
            else found.current_version
        )
        if version is None:
            raise CommandError(f"project {project!r} has no model version {base_version or '(current)'}")
        settings = {name: options[name] for name in defaults.COMMON if options.get(name) is not None}
        try:
            filters = ({"reviewers": reviewer} if reviewer else {}) | ({"agreed_only": True} if agreed_only else {})
            job = services.launch(found, base_version=version, filters=filters, include_uploads=include_uploads,
                                  enqueue=not here, **settings)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        uploads = f", plus {job.uploads_text}" if job.train_uploads else ""
        self.stdout.write(f"job {job.pk} launched: {job.train_count} training and "
                          f"{job.held_out_count} held-out records{uploads}, {job.epochs} epochs")
        if not here:
            self.stdout.write("queued on the `gpu` queue; start a worker with: celery -A annotate worker -Q gpu")
            return
        outcome = runner.train(job.pk, f"launch_training:{job.pk}")
        job = TrainingJob.objects.get(pk=job.pk)
        self.stdout.write(f"job {job.pk}: {outcome} ({job.state}){': ' + job.error if job.error else ''}")
        if job.metrics.get("new"):
            self.stdout.write(f"held-out {job.metrics['new']['metric']}: base "
                              f"{(job.metrics.get('base') or {}).get('value')} -> new {job.metrics['new']['value']}")
        if job.state != "SUCCEEDED":
            raise CommandError(f"job {job.pk} ended {job.state}")
