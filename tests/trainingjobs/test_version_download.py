"""Downloading a model version: its `tool.json` and `model.safetensors` in one zip, sent as it is made, for the
project's admins only; a version without files says why instead."""

from __future__ import annotations

import html
import io
import time
import zipfile

import pytest
import torch
from django.contrib.messages import get_messages
from django.urls import reverse

from annotate import versions
from annotate.models import ModelVersion
from tensorcode import tools
from trainingjobs import runner, services


@pytest.fixture
def trained(project, reviewed) -> ModelVersion:
    job = services.launch(project, base_version=project.current_version, epochs=1, minibatch_size=4)
    runner.train(job.pk, "worker-a")
    job.refresh_from_db()
    return job.result_version


def download(client, version: ModelVersion):
    return client.get(reverse("trainingjobs:version_download", args=[version.pk]))


def test_an_admin_downloads_a_trained_version_that_loads_as_the_same_tool(client, admin, project, trained,
                                                                          tmp_path) -> None:
    client.force_login(admin)

    response = download(client, trained)

    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"] == f'attachment; filename="outages-version-{trained.pk}.zip"'
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert archive.namelist() == ["tool.json", "model.safetensors"]
    for entry in archive.infolist():
        assert archive.read(entry) == (trained.path / entry.filename).read_bytes()
        assert entry.external_attr >> 16 == 0o644  # readable once unzipped, dated as the file
        mtime = (trained.path / entry.filename).stat().st_mtime
        assert entry.date_time == time.localtime(mtime)[:5] + (time.localtime(mtime).tm_sec // 2 * 2,)
    archive.extractall(tmp_path / "tool")
    loaded, kept = tools.load_pretrained(tmp_path / "tool").state_dict(), trained.load().state_dict()
    assert loaded.keys() == kept.keys() and all(torch.equal(loaded[k], kept[k]) for k in kept)
    page = client.get(reverse("trainingjobs:project_jobs", args=[project.slug])).content.decode()
    assert f'href="{reverse("trainingjobs:version_download", args=[trained.pk])}"' in page


def test_large_weights_go_out_a_chunk_at_a_time(client, admin, project) -> None:
    version = ModelVersion.objects.allocate(project, label="big", trained=True)
    (version.path / "tool.json").write_text('{"tool": "decision"}')
    weights = bytes(range(256)) * (5 * versions.CHUNK // 256 // 2)  # 2.5 chunks
    (version.path / "model.safetensors").write_bytes(weights)
    client.force_login(admin)

    chunks = list(download(client, version).streaming_content)

    assert len(chunks) >= 3 and max(map(len, chunks)) <= versions.CHUNK + 64 * 1024
    assert zipfile.ZipFile(io.BytesIO(b"".join(chunks))).read("model.safetensors") == weights


def test_a_version_without_files_says_why_instead(client, admin, project) -> None:
    client.force_login(admin)
    untrained = project.current_version  # a fresh tool, made the first time a worker predicts with it

    response = download(client, untrained)

    assert response.status_code == 302
    assert response["Location"] == reverse("trainingjobs:project_jobs", args=[project.slug])
    [message] = [str(m) for m in get_messages(response.wsgi_request)]
    assert message == (f"Version {untrained.pk} (untrained) has no files to download yet: an untrained version's "
                       "fresh tool is made the first time a worker predicts with it.")

    lost = ModelVersion.objects.allocate(project, label="lost", trained=True)
    (lost.path / "tool.json").write_text("{}")  # its weights are gone
    response = download(client, lost)
    page = html.unescape(client.get(response["Location"]).content.decode())
    assert f"Version {lost.pk} (lost) has no files to download yet: its files are missing from the artifact" in page


def test_reviewers_get_403_outsiders_404_and_the_signed_out_the_sign_in_page(
        client, reviewer, trained, django_user_model) -> None:
    client.force_login(reviewer)
    assert download(client, trained).status_code == 403
    client.force_login(django_user_model.objects.create_user("olga"))
    assert download(client, trained).status_code == 404
    client.logout()
    assert download(client, trained)["Location"].startswith(reverse("login"))
