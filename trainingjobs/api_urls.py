"""Training jobs' URLs in the JSON API; `annotate.api_urls` adds them to its own, under `/api/`."""

from __future__ import annotations

from django.urls import path

from trainingjobs import api

urlpatterns = [
    path("projects/<slug:slug>/jobs", api.jobs, name="jobs"),
    path("jobs/<int:job_id>", api.job_detail, name="job"),
    path("jobs/<int:job_id>/cancel", api.job_cancel, name="job_cancel"),
    path("jobs/<int:job_id>/resume", api.job_resume, name="job_resume"),
    path("jobs/<int:job_id>/continue", api.job_continue, name="job_continue"),
    path("versions/<int:version_id>/promote", api.version_promote, name="version_promote"),
]
