"""Django admin for jobs: staff can see every field and cancel or re-queue jobs in bulk."""

from __future__ import annotations

from django.contrib import admin, messages

from annotate.admin import DeletedThroughService, Shown, ViewOnly
from trainingjobs import services
from trainingjobs.models import LossPoint, TrainingJob


@admin.register(TrainingJob)
class TrainingJobAdmin(DeletedThroughService, Shown, admin.ModelAdmin):
    """Jobs are launched on a project's Training page or with `manage.py launch_training`, which freeze the
    reviewed records they train on and queue them: a row added here had no records and was never queued, and as
    a job waiting it blocked deleting the project's items. A job's settings and state are what it ran with and
    how it went, shown here; it is cancelled or resumed with the actions, and deleted (its checkpoints and loss
    points with it, the version it made kept) once it is over."""

    list_display = ("id", "project", "state", "step", "total_steps", "worker_host", "created_at", "finished_at")
    list_filter = ("state", "project")
    search_fields = ("project__slug", "worker_host", "lease_owner")
    raw_id_fields = ("base_version", "result_version", "created_by")
    actions = ("cancel_jobs", "resume_jobs")

    @admin.action(description="Cancel the selected jobs")
    def cancel_jobs(self, request, queryset):
        self._each(request, queryset, services.cancel, "cancel requested for")

    @admin.action(description="Resume the selected cancelled or failed jobs")
    def resume_jobs(self, request, queryset):
        self._each(request, queryset, services.resume, "queued again:")

    def _each(self, request, queryset, action, done: str) -> None:
        """`action` on each job; what went through is said too, not only the refusals."""
        acted = []
        for job in queryset:
            try:
                action(job.pk)
            except services.JobActionError as exc:
                self.message_user(request, f"Job {job.pk}: {exc}", messages.WARNING)
            else:
                acted.append(str(job.pk))
        if acted:
            self.message_user(request, f"{done.capitalize()} job{'s' if len(acted) > 1 else ''} {', '.join(acted)}.")


@admin.register(LossPoint)
class LossPointAdmin(ViewOnly, admin.ModelAdmin):
    """A job's loss curve, written by its worker: it goes with its job."""

    list_display = ("job", "step", "epoch", "loss")
    list_filter = ("job",)
