"""Pages of training jobs, for a project's admins (and staff): launch, watch, cancel, resume, continue, promote,
and upload a model trained elsewhere as a version.

A job page polls its status fragment every second; once the job is final the fragment answers HTTP 286, which
tells htmx to stop polling. The page's messages ("Job 4 queued.") sit outside that fragment, so a poll that finds
the job in a new state also replaces them (out of band): the live status takes over from the message.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.db.models.functions import Mod
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HTMX_STOP_POLLING

from annotate import versions as version_uploads
from annotate.models import ModelUpload, ModelVersion, Project
from annotate.views import display
from annotate.views.access import admin_project, remember_roles
from annotate.views.uploads import remove_row, upload_row
from trainingjobs import plot, services, snapshot
from trainingjobs.forms import ContinueForm, LaunchForm, ModelUploadForm
from trainingjobs.models import ACTIVE_STATES, FROZEN_FIELDS, JobState, TrainingJob

# The overview's tabs: which states each shows.
SHOWN = {"all": None, "active": ACTIVE_STATES, "failed": (JobState.FAILED,)}
PER_PAGE = 50


@login_required
@require_GET
@vary_on_headers("HX-Request")
def job_index(request):
    """The jobs of every project the user administers (staff: all), queued and running first. While any is, the
    list polls itself (HTTP 286 once none is); with HX-Request, the list's section alone."""
    projects = Project.objects.administered_by(request.user)
    if request.user.is_staff:
        jobs = TrainingJob.objects.all()
    elif projects.exists():
        jobs = TrainingJob.objects.filter(project__in=projects)
        remember_roles(request, administers=True)
    else:
        remember_roles(request, administers=False)
        raise PermissionDenied("Only a project's admins see its training jobs.")
    show = request.GET.get("show") if request.GET.get("show") in SHOWN else "all"
    listed = jobs.filter(state__in=SHOWN[show]) if SHOWN[show] else jobs
    listed = listed.listed().select_related("project", "base_version", "result_version", "created_by")
    page = Paginator(listed.active_first(), PER_PAGE).get_page(request.GET.get("page"))
    activity = services.activity(jobs)
    context = {
        "page": page, "show": show, "activity": activity,
        "counts": jobs.aggregate(all=Count("id"), failed=Count("id", filter=Q(state=JobState.FAILED))),
        "projects": projects.order_by("name")[:6],  # read by the empty list alone, which names five
    }
    if request.htmx:
        response = render(request, "trainingjobs/_job_index.html", context)
        if not (activity.running or activity.queued):
            response.status_code = HTMX_STOP_POLLING
        return response
    return render(request, "trainingjobs/index.html", context)


@login_required
@require_http_methods(["GET", "POST"])
@vary_on_headers("HX-Request")
def project_jobs(request, slug: str):
    """The project's jobs and the launch form; POST launches a job and opens its page."""
    project = admin_project(request, slug)
    form = LaunchForm(project, request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            job = services.launch(
                project,
                base_version=form.cleaned_data["base_version"],
                created_by=request.user,
                filters=form.filters(),
                include_uploads=form.cleaned_data["include_uploads"],
                **form.settings(),
            )
        except services.JobActionError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Job {job.pk} queued.")
            return _redirect(request, "trainingjobs:job", job.pk)
    records, adjudicated = snapshot.count(project)
    context = {
        "project": project,
        "form": form,
        "records": records,
        "adjudicated": adjudicated,
        # Newest first, a page each: past 50 the older ones were missing from the page, not to be found there.
        "jobs": Paginator(project.training_jobs.listed().select_related("base_version", "result_version", "created_by"),
                          PER_PAGE).get_page(request.GET.get("jobs")),
        "versions": Paginator(project.versions.all(), PER_PAGE).get_page(request.GET.get("versions")),
        "model_uploads": project.model_uploads.select_related("version")[:10],
        "model_upload_form": ModelUploadForm(),
    }
    template = "trainingjobs/_project_jobs.html" if request.htmx else "trainingjobs/project_jobs.html"
    return render(request, template, context, status=400 if form.errors else 200)


@login_required
@require_GET
@vary_on_headers("HX-Request")
def job_detail(request, pk: int):
    """The job page; with HX-Request, its status fragment (HTTP 286 once the job is final)."""
    job = _job(request, pk, polled=bool(request.htmx))
    context = _status_context(job)
    if request.htmx:
        # The fragment polls with the state it shows; until that changes, a message shown with it still holds.
        context["oob"] = request.GET.get("shown") != job.state
        response = render(request, "trainingjobs/_job_status.html", context)
        if job.is_final:
            response.status_code = HTMX_STOP_POLLING
        return response
    return render(request, "trainingjobs/job.html", context)


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = _job(request, pk)
    return _act(request, job, lambda: services.cancel(job.pk), "Cancel requested.")


@login_required
@require_POST
def job_resume(request, pk: int):
    job = _job(request, pk)
    checkpointed = (job.checkpoint_dir / "training.json").is_file()
    resumes = "it resumes from its checkpoint" if checkpointed else "it starts from the beginning (no checkpoint yet)"
    return _act(request, job, lambda: services.resume(job.pk), f"Job queued again; {resumes}.")


@login_required
@require_POST
def job_continue(request, pk: int):
    job = _job(request, pk)
    form = ContinueForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give a whole number of more epochs, from 1 to 10,000.")
        return _act(request, job, None, "")
    extra = form.cleaned_data["extra_epochs"]
    return _act(request, job, lambda: services.continue_training(job.pk, extra), f"Training {extra} more epochs.")


@login_required
@require_POST
def version_promote(request, pk: int):
    """Make a model version its project's current model; pending items are predicted again by it."""
    version = get_object_or_404(ModelVersion.objects.select_related("project"), pk=pk)
    admin_project(request, version.project.slug)
    try:
        services.promote(version, by=request.user)
    except services.JobActionError as exc:
        messages.error(request, f"Nothing was promoted: {exc}.")
    else:
        messages.success(request, f"{version} is now the current model of {version.project}; re-predicting its "
                                  f"items.")
    job_id = request.POST.get("job")
    if job_id and job_id.isdigit() and TrainingJob.objects.filter(pk=job_id, project=version.project).exists():
        return _redirect(request, "trainingjobs:job", int(job_id))
    return _redirect(request, "trainingjobs:project_jobs", version.project.slug)


@login_required
@require_GET
def version_download(request, pk: int):
    """A model version's `tool.json` and `model.safetensors` in one zip, to train further offline (`tensorcode
    train`) and upload back; sent as it is made."""
    version = get_object_or_404(ModelVersion.objects.select_related("project"), pk=pk)
    project = admin_project(request, version.project.slug)
    try:
        chunks = version_uploads.archive(version)
    except version_uploads.NoFiles as exc:
        messages.error(request, f"{exc}.")
        return redirect("trainingjobs:project_jobs", project.slug)
    response = StreamingHttpResponse(chunks, content_type="application/zip")
    response["Content-Disposition"] = content_disposition_header(True, version_uploads.archive_name(version))
    return response


@login_required
@require_POST
def version_upload(request, slug: str):
    """Keep a tool saved with `save_pretrained` elsewhere; a worker checks it and registers it as a version."""
    project = admin_project(request, slug)
    form = ModelUploadForm(request.POST, request.FILES)
    if not form.is_valid():
        for field, errors in form.errors.items():
            label = form.fields[field].label if field in form.fields else field
            messages.error(request, f"{label}: {' '.join(errors)}")
        return _redirect(request, "trainingjobs:project_jobs", project.slug)
    try:
        upload = version_uploads.upload_model(project, request.user, form.cleaned_data["manifest"],
                                              form.cleaned_data["weights"], label=form.cleaned_data["label"])
    except version_uploads.UploadRefused as exc:
        messages.error(request, f"The model was not kept: {exc}")
    else:
        messages.success(request, f"Model upload {upload.pk} received; a worker is checking it against the "
                                  f"project's tool.")
    return _redirect(request, "trainingjobs:project_jobs", project.slug)


@login_required
@require_GET
def version_upload_status(request, slug: str, pk: int):
    """A model upload's check, as a fragment; HTTP 286 once it was accepted or refused."""
    project = admin_project(request, slug)
    upload = get_object_or_404(ModelUpload.objects.select_related("version"), pk=pk, project=project)
    return upload_row(request, "trainingjobs/_model_upload.html", upload, project)


@login_required
@require_POST
def version_upload_remove(request, slug: str, pk: int):
    """Remove a checked model upload's record (the version it became stays); refused while it is being checked."""
    project = admin_project(request, slug)
    upload = get_object_or_404(ModelUpload.objects.select_related("version"), pk=pk, project=project)
    return remove_row(request, project, upload, version_uploads.remove_upload, version_uploads.UploadBeingChecked,
                      template="trainingjobs/_model_upload.html", name=f"Model upload {upload.pk}",
                      page=reverse("trainingjobs:project_jobs", args=[project.slug]))


# -- helpers ---------------------------------------------------------------------------------------------------
def _job(request, pk: int, *, polled: bool = False) -> TrainingJob:
    """Job `pk` if the user administers its project; 404 for non-members (403 for reviewers). The status its page
    polls every second shows no counts of the records the job froze, so it leaves those lists unread."""
    jobs = TrainingJob.objects.select_related("project", "base_version", "result_version", "project__current_version")
    job = get_object_or_404(jobs.defer(*FROZEN_FIELDS) if polled else jobs, pk=pk)
    admin_project(request, job.project.slug)
    return job


def _status_context(job: TrainingJob) -> dict:
    points = job.loss_points.all()
    every = job.step // plot.MAX_POINTS
    if every > 1:  # a long job's page polls every second: read a sample of its steps, not all of them
        points = points.annotate(sample=Mod("step", every)).filter(sample=0)
    history = list(points.values_list("step", "loss"))
    return {
        "job": job,
        "project": job.project,
        "curve": plot.loss_curve(history, job.total_steps),
        "continue_form": ContinueForm(),
        "queue": services.queue_place(job),
        "is_current": job.result_version_id is not None
        and job.project.current_version_id == job.result_version_id,
        "verdict": job.held_out_verdict,  # read several times by the fragment, polled every second
        "changed": _changed_rows(job),
        "calibration": _calibration_text((job.metrics or {}).get("calibration")),
    }


def _calibration_text(report) -> str:
    """An Investigator verifier's refit calibration in words: "temperature 1.37 on 6 held-out pairs; NLL 1.12 to
    1.05, ECE 0.210 to 0.154". A report of another shape (stored by an older version) reads as JSON."""
    if not report:
        return ""
    try:
        before, after = report["before"], report["after"]
        return (f"temperature {report['temperature']:.3g} on {before['count']} held-out "
                f"pair{pluralize(before['count'])}; NLL {before['nll']:.3g} to {after['nll']:.3g}, "
                f"ECE {before['ece']:.3f} to {after['ece']:.3f}")
    except (KeyError, TypeError, ValueError):
        return display.compact(report)


def _changed_rows(job: TrainingJob) -> list[dict]:
    """The held-out items whose prediction changed, targets and answers as one short line of JSON each (a
    distribution or a list of documents read as JSON, not as Python). Rows stored before a row listed its
    targets had one target."""
    rows = []
    for row in (job.metrics or {}).get("changed", []):
        targets = row.get("targets") or [{"target": row.get("target"), "records": 1}]
        rows.append({"item": row["item"], "before_confidence": row.get("before_confidence"),
                     "after_confidence": row.get("after_confidence"), "before": display.compact(row.get("before")),
                     "after": display.compact(row.get("after")), "several": len(targets) > 1,
                     "targets": [{"text": display.compact(t["target"]), "records": t["records"]} for t in targets]})
    return rows


def _act(request, job: TrainingJob, action, success: str):
    """Run a state change; the htmx caller gets the refreshed status fragment, a plain form post a redirect."""
    if action is not None:
        try:
            action()
        except services.JobActionError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, success)
    if request.htmx:
        job.refresh_from_db()
        return render(request, "trainingjobs/_job_status.html", {**_status_context(job), "oob": True})
    return redirect("trainingjobs:job", job.pk)


def _redirect(request, name: str, *args):
    url = reverse(name, args=args)
    if request.htmx:
        return HttpResponse(headers={"HX-Redirect": url})
    return redirect(url)
