"""URLs of the JSON API; the root URLconf includes them under `api/`."""

from __future__ import annotations

from django.apps import apps
from django.urls import path, re_path

from annotate import api, api_agreement

app_name = "api"

urlpatterns = [
    path("projects", api.projects, name="projects"),
    path("projects/<slug:slug>", api.project_detail, name="project"),
    path("projects/<slug:slug>/items", api.items, name="items"),
    path("projects/<slug:slug>/items/<int:item_id>", api.item_detail, name="item"),
    path("projects/<slug:slug>/items/<int:item_id>/adjudication", api_agreement.adjudicate, name="adjudication"),
    path("projects/<slug:slug>/agreement", api_agreement.project_agreement, name="agreement"),
    path("projects/<slug:slug>/disagreements", api_agreement.disagreements, name="disagreements"),
    path("projects/<slug:slug>/imports", api.create_import, name="imports"),
    path("imports/<int:import_id>", api.import_detail, name="import"),
    path("projects/<slug:slug>/exports", api.create_export, name="exports"),
    path("exports/<int:export_id>", api.export_detail, name="export"),
    path("exports/<int:export_id>/download", api.export_download, name="export_download"),
    path("projects/<slug:slug>/versions", api.versions, name="versions"),
    path("versions/<int:version_id>/download", api.version_download, name="version_download"),
    path("model-uploads/<int:upload_id>", api.model_upload_detail, name="model_upload"),
    path("deletions/<int:deletion_id>", api.deletion_detail, name="deletion"),
    path("deletions/<int:deletion_id>/stop", api.deletion_stop, name="deletion_stop"),
]

# Training jobs' part of the API, where that app is installed (the site's pages mount it the same way).
if apps.is_installed("trainingjobs"):
    from trainingjobs.api_urls import urlpatterns as training

    urlpatterns += training

# Last: any other address under api/ is a JSON 404 whatever DEBUG says (with DEBUG on, Django answers an
# unmatched address with its HTML debug page, which a script cannot read).
urlpatterns.append(re_path(r"", api.unknown_address, name="unknown"))
