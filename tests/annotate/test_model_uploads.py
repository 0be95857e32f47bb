"""A model trained elsewhere, uploaded as the two files `save_pretrained` writes, becomes a version (or says why not).

The web process checks the manifest and the sizes and stores the files; the worker (`tasks.check_model_upload`)
loads them strictly against the project's tool and mode and registers the version.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from annotate import tasks, tooling, versions
from annotate.models import ModelUpload, ModelVersion, UploadState

pytestmark = pytest.mark.django_db

CONFIGURATION = {"dim": 8, "buckets": 64}  # the `project` fixture's


def _saved(tmp_path: Path, tool: str = "decision", mode: str = "rank", configuration=None) -> Path:
    directory = tmp_path / f"{tool}-{len(list(tmp_path.iterdir()))}"
    tooling.create_tool(tool, mode, CONFIGURATION if configuration is None else configuration).save_pretrained(
        directory)
    return directory


def _files(directory: Path, *, manifest: bytes | None = None, weights: bytes | None = None) -> dict:
    return {
        "manifest": SimpleUploadedFile("tool.json", (directory / "tool.json").read_bytes() if manifest is None
                                       else manifest),
        "weights": SimpleUploadedFile("model.safetensors", (directory / "model.safetensors").read_bytes()
                                      if weights is None else weights),
    }


def _upload(client, project, files: dict, label: str = ""):
    return client.post(reverse("trainingjobs:version_upload", args=[project.slug]), {**files, "label": label},
                       follow=True)


def test_an_uploaded_tool_becomes_a_version_that_can_be_promoted(client, project, project_admin, tmp_path) -> None:
    directory = _saved(tmp_path)
    client.force_login(project_admin)

    page = _upload(client, project, _files(directory), label="trained on my laptop").content.decode()

    upload = ModelUpload.objects.get()
    assert "Model upload" in page and "a worker is checking it" in page
    assert upload.state == UploadState.PENDING and upload.uploaded_by == project_admin
    assert sorted(p.name for p in upload.directory.iterdir()) == ["model.safetensors", "tool.json"]
    status = reverse("trainingjobs:version_upload_status", args=[project.slug, upload.pk])
    assert client.get(status).status_code == 200  # still being checked: htmx keeps polling

    assert tasks.check_model_upload(upload.pk) == UploadState.ACCEPTED

    upload.refresh_from_db()
    version = upload.version
    assert (version.label, version.trained, version.project) == ("trained on my laptop", True, project)
    assert tooling.load_version(version).configuration() == tooling.create_tool(
        "decision", "rank", CONFIGURATION).configuration()
    assert not upload.directory.exists()  # the version keeps its own copy
    response = client.get(status)
    assert response.status_code == 286  # final: htmx stops polling
    assert "became <strong>trained on my laptop</strong>" in response.content.decode()
    assert reverse("trainingjobs:promote", args=[version.pk]) in response.content.decode()

    client.post(reverse("trainingjobs:promote", args=[version.pk]))

    project.refresh_from_db()
    assert project.current_version == version


def test_a_larger_model_of_the_projects_tool_is_a_version_too(project, project_admin, tmp_path) -> None:
    """The project's configuration is what a fresh tool starts from; a version trained elsewhere may differ."""
    files = _files(_saved(tmp_path, configuration={"dim": 16, "buckets": 64}))
    upload = versions.upload_model(project, project_admin, files["manifest"], files["weights"])

    assert tasks.check_model_upload(upload.pk) == UploadState.ACCEPTED
    upload.refresh_from_db()
    assert tooling.load_version(upload.version).configuration()["dim"] == 16


def test_checking_twice_registers_one_version(project, project_admin, tmp_path) -> None:
    directory = _saved(tmp_path)
    files = _files(directory)
    upload = versions.upload_model(project, project_admin, files["manifest"], files["weights"])
    before = ModelVersion.objects.count()

    assert tasks.check_model_upload(upload.pk) == UploadState.ACCEPTED
    assert tasks.check_model_upload(upload.pk) == UploadState.ACCEPTED
    assert tasks.check_model_upload(upload.pk + 1000) == "missing"
    assert ModelVersion.objects.count() == before + 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"manifest": b"{not json"}, "tool.json: not JSON"),
        ({"manifest": b'{"format": "pickle"}'}, "tool.json: not a tool manifest"),
        ({"manifest": b"[]"}, "tool.json: not a tool manifest"),
        ({"manifest": b" " * (versions.MAX_MANIFEST_BYTES + 1)}, "tool.json: larger than 1.0 MiB"),
    ],
)
def test_a_manifest_that_is_not_the_projects_tool_is_refused_at_once(client, project, project_admin, tmp_path,
                                                                     change, message) -> None:
    client.force_login(project_admin)

    page = _upload(client, project, _files(_saved(tmp_path), **change)).content.decode()

    assert f"The model was not kept: {message}" in page
    assert not ModelUpload.objects.exists()


def test_another_tools_files_and_oversize_weights_are_refused_at_once(client, project, project_admin, tmp_path,
                                                                      settings) -> None:
    client.force_login(project_admin)

    page = _upload(client, project, _files(_saved(tmp_path, "chatbot", "reply", {}))).content.decode()
    assert "tool.json: a &#x27;chatbot&#x27; tool, but this project uses &#x27;decision&#x27;" in page

    settings.TC_MODEL_MAX_BYTES = 1000
    page = _upload(client, project, _files(_saved(tmp_path))).content.decode()
    assert "model.safetensors:" in page and "larger than the limit of 0.0 MiB (TC_MODEL_MAX_BYTES)" in page

    page = _upload(client, project, {"manifest": _files(_saved(tmp_path))["manifest"]}).content.decode()
    assert "model.safetensors: This field is required." in page
    assert not ModelUpload.objects.exists()
    assert not list((Path(settings.TC_ARTIFACT_DIR) / "model-uploads").glob("*/*"))


def test_a_name_longer_than_a_version_keeps_is_refused_not_cut(project, project_admin, tmp_path) -> None:
    """The API took any label and kept its first 200 characters without saying so."""
    with pytest.raises(versions.UploadRefused, match="^label: at most 200 characters, got 201$"):
        versions.upload_model(project, project_admin, *_files(_saved(tmp_path)).values(), label="x" * 201)
    assert not ModelUpload.objects.exists()

    upload = versions.upload_model(project, project_admin, *_files(_saved(tmp_path)).values(),
                                   label="  from the lab\x00 " + " " * 200)
    assert upload.label == "from the lab"  # spaces around it and NUL characters do not count


def test_weights_that_lie_about_their_size_leave_nothing_behind(project, project_admin, tmp_path, settings) -> None:
    files = _files(_saved(tmp_path))
    settings.TC_MODEL_MAX_BYTES = files["weights"].size - 1
    files["weights"].size = 10  # declared smaller than it is: the copy itself stops at the limit

    with pytest.raises(versions.UploadRefused, match="larger than the limit"):
        versions.upload_model(project, project_admin, files["manifest"], files["weights"])

    assert not ModelUpload.objects.exists()
    assert not list((Path(settings.TC_ARTIFACT_DIR) / "model-uploads").glob("*/*"))


@pytest.mark.parametrize(
    ("weights_of", "reason"),
    [
        (None, "model.safetensors: not a safetensors file"),  # some other file under that name
        ({"dim": 16, "buckets": 64}, "model.safetensors: ranker."),  # a larger model's weights than tool.json says
    ],
)
def test_files_the_library_would_not_load_are_refused_with_the_reason(project, project_admin, tmp_path, weights_of,
                                                                      reason) -> None:
    directory = _saved(tmp_path)
    other = (_saved(tmp_path, configuration=weights_of) / "model.safetensors").read_bytes() if weights_of else None
    files = _files(directory, weights=b"\x00" * 64 if other is None else other)
    upload = versions.upload_model(project, project_admin, files["manifest"], files["weights"])
    before = ModelVersion.objects.count()

    assert tasks.check_model_upload(upload.pk) == UploadState.REFUSED

    upload.refresh_from_db()
    assert upload.reason.startswith(reason), upload.reason
    assert str(upload.directory) not in upload.reason and "/" not in upload.reason.split(":")[0]  # no server path
    assert upload.version is None and ModelVersion.objects.count() == before
    assert not upload.directory.exists()


def test_only_the_projects_admins_upload_or_watch(client, project, project_admin, reviewer, outsider,
                                                  tmp_path) -> None:
    directory = _saved(tmp_path)
    files = _files(directory)
    upload = versions.upload_model(project, project_admin, files["manifest"], files["weights"])
    url = reverse("trainingjobs:version_upload", args=[project.slug])
    status = reverse("trainingjobs:version_upload_status", args=[project.slug, upload.pk])
    for user, code in ((outsider, 404), (reviewer, 403)):
        client.force_login(user)
        assert client.post(url, _files(directory)).status_code == code
        assert client.get(status).status_code == code
    client.logout()
    assert client.get(status).status_code == 302  # to sign in
    client.force_login(project_admin)
    assert client.get(url).status_code == 405
    assert ModelUpload.objects.count() == 1


def test_uploading_needs_the_csrf_token(project, project_admin, tmp_path) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(project_admin)

    response = client.post(reverse("trainingjobs:version_upload", args=[project.slug]), _files(_saved(tmp_path)))

    assert response.status_code == 403
    assert not ModelUpload.objects.exists()


def test_the_training_page_offers_the_upload_and_lists_uploads(client, project, project_admin, tmp_path) -> None:
    files = _files(_saved(tmp_path), weights=b"\x00" * 64)
    upload = versions.upload_model(project, project_admin, files["manifest"], files["weights"], label="broken")
    tasks.check_model_upload(upload.pk)
    client.force_login(project_admin)

    page = client.get(reverse("trainingjobs:project_jobs", args=[project.slug])).content.decode()

    assert 'enctype="multipart/form-data"' in page and "Upload a model trained elsewhere" in page
    assert f'id="model-upload-{upload.pk}"' in page and "Refused" in page


def _remove(client, project, upload, **headers):
    return client.post(reverse("trainingjobs:version_upload_remove", args=[project.slug, upload.pk]), **headers)


def test_a_checked_upload_is_removed_from_the_list_and_its_version_stays(client, project, project_admin,
                                                                          tmp_path) -> None:
    files = _files(_saved(tmp_path))
    accepted = versions.upload_model(project, project_admin, files["manifest"], files["weights"], label="laptop")
    tasks.check_model_upload(accepted.pk)
    files = _files(_saved(tmp_path), weights=b"\x00" * 64)
    refused = versions.upload_model(project, project_admin, files["manifest"], files["weights"])
    tasks.check_model_upload(refused.pk)
    version = ModelUpload.objects.get(pk=accepted.pk).version
    client.force_login(project_admin)
    page = client.get(reverse("trainingjobs:project_jobs", args=[project.slug])).content.decode()
    assert page.count("Remove model upload") == 2 and "laptop stays a model version" in page

    fragment = _remove(client, project, accepted, HTTP_HX_REQUEST="true")
    response = _remove(client, project, refused, follow=True)

    assert fragment.status_code == 200 and f"Model upload {accepted.pk} removed." in fragment.content.decode()
    assert f"Model upload {refused.pk} removed." in response.content.decode()
    assert not ModelUpload.objects.exists()
    assert ModelVersion.objects.filter(pk=version.pk, label="laptop").exists()
    assert version.label in client.get(reverse("trainingjobs:project_jobs", args=[project.slug])).content.decode()
    assert _remove(client, project, accepted).status_code == 404  # gone


def test_an_upload_being_checked_is_not_removed(client, project, project_admin, tmp_path) -> None:
    files = _files(_saved(tmp_path))
    upload = versions.upload_model(project, project_admin, files["manifest"], files["weights"])
    client.force_login(project_admin)
    assert "Remove model upload" not in client.get(
        reverse("trainingjobs:project_jobs", args=[project.slug])).content.decode()

    fragment = _remove(client, project, upload, HTTP_HX_REQUEST="true").content.decode()
    page = _remove(client, project, upload, follow=True).content.decode()

    reason = f"Model upload {upload.pk} is being checked by a worker: remove it once it is accepted or refused."
    assert reason in fragment and f'id="model-upload-{upload.pk}"' in fragment
    assert reason in page
    upload.refresh_from_db()
    assert upload.state == UploadState.PENDING
    assert sorted(p.name for p in upload.directory.iterdir()) == ["model.safetensors", "tool.json"]
    assert tasks.check_model_upload(upload.pk) == UploadState.ACCEPTED  # the check is unaffected


def test_only_the_projects_admins_remove_an_upload_with_the_csrf_token(client, project, project_admin, reviewer,
                                                                       outsider, tmp_path) -> None:
    files = _files(_saved(tmp_path), weights=b"\x00" * 64)
    upload = versions.upload_model(project, project_admin, files["manifest"], files["weights"])
    tasks.check_model_upload(upload.pk)
    for user, code in ((outsider, 404), (reviewer, 403)):
        client.force_login(user)
        assert _remove(client, project, upload).status_code == code
    client.logout()
    assert _remove(client, project, upload).status_code == 302  # to sign in
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(project_admin)
    assert _remove(strict, project, upload).status_code == 403
    client.force_login(project_admin)
    assert client.get(reverse("trainingjobs:version_upload_remove", args=[project.slug, upload.pk])).status_code == 405
    assert ModelUpload.objects.filter(pk=upload.pk).exists()
