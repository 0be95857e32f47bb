"""URLs of training jobs, included by the root URLconf under `jobs/`."""

from __future__ import annotations

from django.urls import path

from trainingjobs import views

app_name = "trainingjobs"

urlpatterns = [
    path("", views.job_index, name="index"),
    path("projects/<slug:slug>/", views.project_jobs, name="project_jobs"),
    path("projects/<slug:slug>/versions/upload", views.version_upload, name="version_upload"),
    path("projects/<slug:slug>/versions/uploads/<int:pk>", views.version_upload_status, name="version_upload_status"),
    path("projects/<slug:slug>/versions/uploads/<int:pk>/remove", views.version_upload_remove,
         name="version_upload_remove"),
    path("<int:pk>/", views.job_detail, name="job"),
    path("<int:pk>/cancel", views.job_cancel, name="cancel"),
    path("<int:pk>/resume", views.job_resume, name="resume"),
    path("<int:pk>/continue", views.job_continue, name="continue"),
    path("versions/<int:pk>/promote", views.version_promote, name="promote"),
    path("versions/<int:pk>/download", views.version_download, name="version_download"),
]
