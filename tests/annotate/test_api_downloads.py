"""The JSON API's downloads, for scripts that train offline: a finished export's archive, the project's model
versions, and a version's files in one zip. Admins only; what is not there yet is 409 with the reason."""

from __future__ import annotations

import io
import zipfile

import pytest

from annotate import export as exports
from annotate import queue
from annotate.models import ApiToken, Export, ModelVersion
from tensorcode import tools

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_auth(project, project_admin) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.objects.issue(project_admin, name='offline')[1]}"}


@pytest.fixture
def reviewer_auth(project, reviewer) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.objects.issue(reviewer)[1]}"}


@pytest.fixture
def trained(project) -> ModelVersion:
    """A version with its files, made from the untrained one; the project's current model."""
    version = ModelVersion.objects.allocate(project, label="trained on 3 answers", trained=True,
                                            parent=project.current_version, metrics={"held_out": {"top1": 1.0}})
    tools.create("decision", dim=8, buckets=64).save_pretrained(version.path)
    project.current_version = version
    project.save(update_fields=["current_version"])
    return version


def test_a_script_lists_the_versions_and_downloads_the_current_one(client, project, trained, admin_auth) -> None:
    listed = client.get("/api/projects/outages/versions", **admin_auth)

    assert listed.status_code == 200
    body = listed.json()
    assert body["current"] == trained.pk
    assert [v["label"] for v in body["versions"]] == ["trained on 3 answers", "untrained"]  # newest first
    newest = body["versions"][0]
    assert newest | {"created_at": None} == {
        "id": trained.pk, "label": "trained on 3 answers", "trained": True, "parent": trained.parent_id,
        "metrics": {"held_out": {"top1": 1.0}}, "created_at": None, "download": f"/api/versions/{trained.pk}/download"}

    response = client.get(newest["download"], **admin_auth)

    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"] == f'attachment; filename="outages-version-{trained.pk}.zip"'
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert {n: archive.read(n) for n in archive.namelist()} == {
        n: (trained.path / n).read_bytes() for n in ("tool.json", "model.safetensors")}


def test_a_version_without_files_is_409_with_the_reason(client, project, admin_auth) -> None:
    response = client.get(f"/api/versions/{project.current_version_id}/download", **admin_auth)

    assert response.status_code == 409
    assert response.json() == {"error": f"Version {project.current_version_id} (untrained) has no files to "
                                        "download yet: an untrained version's fresh "
                                        "tool is made the first time a worker predicts with it"}


def test_a_finished_export_downloads_as_its_archive_and_an_unfinished_one_is_409(
        client, project, admin_auth, ready_items, reviewer) -> None:
    (item,) = ready_items(project, [0.4])
    queue.claim_next(project, reviewer)
    queue.submit(item, reviewer, "db")
    started = client.post("/api/projects/outages/exports", data={"minibatch_size": 8, "format": "jsonl"},
                          content_type="application/json", **admin_auth).json()
    url = f"/api/exports/{started['id']}/download"
    assert started["download"] is None

    waiting = client.get(url, **admin_auth)
    assert waiting.status_code == 409
    assert waiting.json() == {"error": f"export {started['id']} is PENDING, not SUCCEEDED: there is nothing to "
                                       f"download", "state": "PENDING"}

    exports.run(Export.objects.get(pk=started["id"]))
    assert client.get(f"/api/exports/{started['id']}", **admin_auth).json()["download"] == url
    response = client.get(url, **admin_auth)
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="{exports.archive_name(started["id"])}"'
    assert b"".join(response.streaming_content) == exports.archive_path(Export.objects.get()).read_bytes()


def test_reviewers_get_403_or_404_and_outsiders_404(client, project, trained, reviewer_auth,
                                                    django_user_model) -> None:
    assert client.get("/api/projects/outages/versions", **reviewer_auth).status_code == 403
    assert client.get(f"/api/versions/{trained.pk}/download", **reviewer_auth).status_code == 404
    export = Export.objects.create(project=project, state="SUCCEEDED")
    assert client.get(f"/api/exports/{export.pk}/download", **reviewer_auth).status_code == 404
    olga = django_user_model.objects.create_user("olga")
    outsider = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.objects.issue(olga)[1]}"}
    assert client.get("/api/projects/outages/versions", **outsider).status_code == 404
    assert client.get(f"/api/versions/{trained.pk}/download", **outsider).status_code == 404
    assert client.get("/api/projects/outages/versions").status_code == 401
