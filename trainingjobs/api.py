"""Training jobs in the JSON API (`annotate.api`'s tokens, errors and reach; mounted with its URLs under `/api/`):
launch a job, follow it, cancel it, and promote the version it made. What the training page does, for scripts.

A launch is checked by the page's own form (`LaunchForm`), so the settings, their defaults (the tool kind's) and
their limits are the page's; each problem is answered with 400 naming the field, and no job is created.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from annotate.api import _accepted, _admin_project, _administered, _error, _iso, _json_body, token_required
from annotate.models import ApiToken, ModelVersion, Project
from trainingjobs import services
from trainingjobs.forms import SETTINGS, LaunchForm
from trainingjobs.models import FROZEN_FIELDS, TrainingJob

FIELDS = (*SETTINGS, "reviewers", "agreed_only", "include_uploads")


@require_http_methods(["GET", "POST"])
@token_required
def jobs(request: HttpRequest, token: ApiToken, slug: str) -> JsonResponse:
    """`POST /api/projects/<slug>/jobs` with the job's settings (each optional): launch it. 202 and
    `Location: /api/jobs/<id>`. `GET` lists the project's 50 newest jobs."""
    project = _admin_project(token, slug, "training in")
    if isinstance(project, JsonResponse):
        return project
    if request.method == "GET":
        rows = project.training_jobs.listed().select_related("project")[:50]
        return JsonResponse({"jobs": [job_json(job) for job in rows]})
    body = _json_body(request, 64 * 1024)
    if isinstance(body, JsonResponse):
        return body
    if not isinstance(body, dict):
        return _error(400, "expected a JSON object of the job's settings")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        return _error(400, f"unknown field {unknown[0]!r}; valid fields: {', '.join(sorted(FIELDS))}")
    return _launch(project, token, body)


def _launch(project: Project, token: ApiToken, body: dict) -> JsonResponse:
    reviewers = body.get("reviewers", [])
    if not isinstance(reviewers, list) or not all(isinstance(name, str) for name in reviewers):
        return _error(400, "reviewers: expected a list of usernames", errors={"reviewers": ["expected a list"]})
    data = LaunchForm.settings_for(project)
    data |= {key: value for key, value in body.items() if key in SETTINGS} | {"reviewers": ",".join(reviewers)}
    for flag in ("agreed_only", "include_uploads"):
        if body.get(flag) is True:
            data[flag] = "on"
        elif body.get(flag) not in (None, False):
            return _error(400, f"{flag}: expected true or false", errors={flag: ["expected true or false"]})
    form = LaunchForm(project, data=data)
    if not form.is_valid():
        errors = {field: [str(e) for e in messages] for field, messages in form.errors.items()}
        first = next(iter(errors.items()))
        return _error(400, f"{first[0]}: {first[1][0]}", errors=errors)
    if body.get("include_uploads") and form.fields["include_uploads"].disabled:
        return _error(400, "include_uploads: the project has no accepted experience uploads",
                      errors={"include_uploads": ["no accepted experience uploads"]})
    try:
        job = services.launch(project, base_version=form.cleaned_data["base_version"], created_by=token.user,
                              filters=form.filters(), include_uploads=form.cleaned_data["include_uploads"],
                              **form.settings())
    except services.JobActionError as exc:
        return _error(400, str(exc))
    return _accepted(job_json(job), reverse("api:job", args=[job.pk]))


@require_http_methods(["GET"])
@token_required
def job_detail(request: HttpRequest, token: ApiToken, job_id: int) -> JsonResponse:
    """`GET /api/jobs/<id>`: the job's state and progress, and once it succeeded its result and held-out figures."""
    job = _administered(token, TrainingJob, job_id, defer=(*FROZEN_FIELDS, "log"))
    if job is None:
        return _error(404, f"no training job {job_id} that this token can reach")
    return JsonResponse(job_json(job))


@require_POST
@token_required
def job_cancel(request: HttpRequest, token: ApiToken, job_id: int) -> JsonResponse:
    """`POST /api/jobs/<id>/cancel`: at once when queued, at its next step when running; 409 once it is over."""
    return _act(token, job_id, services.cancel)


@require_POST
@token_required
def job_resume(request: HttpRequest, token: ApiToken, job_id: int) -> JsonResponse:
    """`POST /api/jobs/<id>/resume`: queue a cancelled or failed job again, from its last checkpoint; 409 for
    a job in any other state."""
    return _act(token, job_id, services.resume)


@require_POST
@token_required
def job_continue(request: HttpRequest, token: ApiToken, job_id: int) -> JsonResponse:
    """`POST /api/jobs/<id>/continue` with `{"extra_epochs": n}`: train a succeeded job n epochs more, from its
    final checkpoint (the result is a new version); 409 for a job that has not succeeded."""
    body = _json_body(request, 1024)
    if isinstance(body, JsonResponse):
        return body
    extra = body.get("extra_epochs") if isinstance(body, dict) else None
    if not isinstance(body, dict) or set(body) != {"extra_epochs"} or isinstance(extra, bool) or not isinstance(
            extra, int) or not 1 <= extra <= MAX_EXTRA_EPOCHS:
        return _error(400, f'expected {{"extra_epochs": n}} with n a whole number from 1 to {MAX_EXTRA_EPOCHS}')
    return _act(token, job_id, lambda pk: services.continue_training(pk, extra))


MAX_EXTRA_EPOCHS = 10_000  # as the job page's form


def _act(token: ApiToken, job_id: int, action) -> JsonResponse:
    """`action(job id)` on a job the token administers: the job as `GET` gives it, or 409 with why not."""
    job = _administered(token, TrainingJob, job_id, defer=(*FROZEN_FIELDS, "log"))
    if job is None:
        return _error(404, f"no training job {job_id} that this token can reach")
    try:
        job = action(job.pk)
    except services.JobActionError as exc:
        return _error(409, str(exc), state=job.state)
    return JsonResponse(job_json(job))


@require_POST
@token_required
def version_promote(request: HttpRequest, token: ApiToken, version_id: int) -> JsonResponse:
    """`POST /api/versions/<id>/promote`: make the version its project's current model, as the page's Promote
    does (the items waiting for review are predicted again by it)."""
    version = _administered(token, ModelVersion, version_id)
    if version is None:
        return _error(404, f"no model version {version_id} that this token can reach")
    try:
        services.promote(version, by=token.user)
    except services.JobActionError as exc:
        return _error(409, str(exc))
    return JsonResponse({"project": version.project.slug, "current_version": version.pk})


def job_json(job: TrainingJob) -> dict:
    return {
        "id": job.pk,
        "project": job.project.slug,
        "state": job.state,
        "cancel_requested": job.cancel_requested,
        "error": job.error,
        "step": job.step,
        "total_steps": job.total_steps,
        "epoch": job.epoch,
        "settings": {name: getattr(job, name) for name in SETTINGS if name != "base_version"},
        "filters": job.filters,
        "base_version": job.base_version_id,
        "result_version": job.result_version_id,
        "held_out": {key: job.metrics[key] for key in ("base", "new") if key in (job.metrics or {})},
        "worker": job.worker_host,
        "device": job.device_used,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
    }
