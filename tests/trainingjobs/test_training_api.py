"""Training through the JSON API: launch a job (checked as the page's form checks it), follow it, cancel it,
promote its version; upload a model trained elsewhere and follow its check. Admins' tokens only."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from annotate import tooling
from annotate import versions as model_versions
from annotate.models import ApiToken, ModelUpload, ModelVersion, Project
from tests.trainingjobs.conftest import CONFIGURATION
from trainingjobs import defaults, runner
from trainingjobs.models import JobState, TrainingJob


@pytest.fixture
def auth(project, admin) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.objects.issue(admin, name='pipeline')[1]}"}


def post(client, url: str, body, auth: dict):
    return client.post(url, data=json.dumps(body), content_type="application/json", **auth)


def test_a_script_launches_follows_and_promotes_a_job(client, project, reviewed, auth, admin) -> None:
    launched = post(client, "/api/projects/outages/jobs", {"epochs": 2, "minibatch_size": 4, "seed": 3}, auth)

    assert launched.status_code == 202, launched.content
    job = TrainingJob.objects.get()
    assert launched["Location"] == f"/api/jobs/{job.pk}" and launched.json()["state"] == "PENDING"
    tool_defaults = defaults.for_tool("decision")
    assert (job.epochs, job.minibatch_size, job.seed, job.lr, job.optimizer, job.created_by, job.base_version) == (
        2, 4, 3, tool_defaults["lr"], tool_defaults["optimizer"], admin, project.current_version)

    runner.train(job.pk, "worker-a")
    followed = client.get(launched["Location"], **auth).json()

    assert followed["state"] == "SUCCEEDED" and followed["step"] == followed["total_steps"] > 0
    assert followed["result_version"] and set(followed["held_out"]) == {"base", "new"}
    assert followed["settings"]["epochs"] == 2 and followed["worker"]
    assert [j["id"] for j in client.get("/api/projects/outages/jobs", **auth).json()["jobs"]] == [job.pk]

    promoted = client.post(f"/api/versions/{followed['result_version']}/promote", **auth)

    assert promoted.status_code == 200
    assert promoted.json() == {"project": "outages", "current_version": followed["result_version"]}
    project.refresh_from_db()
    assert project.current_version_id == followed["result_version"]


def test_a_launch_takes_the_pages_filters(client, project, reviewed, reviewer, auth) -> None:
    launched = post(client, "/api/projects/outages/jobs", {"reviewers": [reviewer.username], "agreed_only": False,
                                                           "epochs": 1}, auth)

    assert launched.status_code == 202, launched.content
    assert TrainingJob.objects.get().filters == {"reviewers": [reviewer.username]}
    assert launched.json()["filters"] == {"reviewers": [reviewer.username]}


@pytest.mark.parametrize(("body", "status", "error"), [
    ({"epoch": 3}, 400, "unknown field 'epoch'; valid fields: agreed_only, base_version, checkpoint_interval"),
    ({"epochs": 0}, 400, "epochs: Ensure this value is greater than or equal to 1."),
    ({"device": "tpu"}, 400, "device: Select a valid choice. tpu is not one of the available choices."),
    ({"lr": "fast"}, 400, "lr: Enter a number."),
    ({"reviewers": "rita"}, 400, "reviewers: expected a list of usernames"),
    ({"agreed_only": "yes"}, 400, "agreed_only: expected true or false"),
    ({"include_uploads": True}, 400, "include_uploads: the project has no accepted experience uploads"),
    ({"reviewers": ["nobody"]}, 400, "no reviewed records match; review some items (or widen the filters) first"),
    ([1, 2], 400, "expected a JSON object of the job's settings"),
])
def test_a_bad_launch_is_400_naming_the_problem_and_creates_no_job(client, project, reviewed, auth, body, status,
                                                                   error) -> None:
    response = post(client, "/api/projects/outages/jobs", body, auth)

    assert response.status_code == status
    assert response.json()["error"].startswith(error), response.json()
    assert not TrainingJob.objects.exists()


def test_a_base_version_of_another_project_is_refused(client, project, reviewed, auth) -> None:
    other = Project.objects.create(slug="billing", name="Billing", tool="decision", mode="rank",
                                   configuration=CONFIGURATION)
    foreign = ModelVersion.objects.allocate(other, label="theirs", trained=False)

    response = post(client, "/api/projects/outages/jobs", {"base_version": foreign.pk}, auth)

    assert response.status_code == 400 and "base_version" in response.json()["errors"]
    assert not TrainingJob.objects.exists()


def test_cancel_stops_a_queued_job_and_is_409_once_it_is_over(client, project, reviewed, auth) -> None:
    job_url = post(client, "/api/projects/outages/jobs", {"epochs": 1}, auth)["Location"]

    cancelled = client.post(f"{job_url}/cancel", **auth)
    again = client.post(f"{job_url}/cancel", **auth)

    assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"
    assert again.status_code == 409
    assert again.json() == {"error": "the job is already cancelled", "state": "CANCELLED"}
    assert TrainingJob.objects.get().state == JobState.CANCELLED


def test_reviewers_and_outsiders_reach_no_job(client, project, reviewed, reviewer, auth, django_user_model) -> None:
    job_url = post(client, "/api/projects/outages/jobs", {"epochs": 1}, auth)["Location"]
    version = project.current_version_id
    for user, launch_status in ((reviewer, 403), (django_user_model.objects.create_user("olga"), 404)):
        key = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.objects.issue(user)[1]}"}
        assert post(client, "/api/projects/outages/jobs", {}, key).status_code == launch_status
        assert client.get(job_url, **key).status_code == 404
        assert client.post(f"{job_url}/cancel", **key).status_code == 404
        assert client.post(f"/api/versions/{version}/promote", **key).status_code == 404
    assert client.get(job_url).status_code == 401
    assert TrainingJob.objects.get().state == JobState.PENDING


def _saved_tool(tmp_path, tool: str = "decision", mode: str = "rank") -> dict:
    directory = tmp_path / f"{tool}-{mode}"
    tooling.create_tool(tool, mode, CONFIGURATION).save_pretrained(directory)
    return {"manifest": SimpleUploadedFile("tool.json", (directory / "tool.json").read_bytes()),
            "weights": SimpleUploadedFile("model.safetensors", (directory / "model.safetensors").read_bytes())}


def test_a_script_uploads_a_model_trained_elsewhere_and_follows_its_check(client, project, auth, tmp_path) -> None:
    sent = client.post("/api/projects/outages/versions", {**_saved_tool(tmp_path), "label": "from the lab"}, **auth)

    assert sent.status_code == 202, sent.content
    upload = ModelUpload.objects.get()
    assert sent["Location"] == f"/api/model-uploads/{upload.pk}"
    assert sent.json()["state"] == "PENDING" and sent.json()["label"] == "from the lab"

    model_versions.check(upload.pk)  # the worker's task
    checked = client.get(sent["Location"], **auth).json()

    assert checked["state"] == "ACCEPTED" and checked["checked_at"]
    assert ModelVersion.objects.get(pk=checked["version"]).label == "from the lab"


def test_a_model_upload_missing_a_file_or_of_another_tool_is_400_and_keeps_nothing(client, project, auth,
                                                                                  tmp_path) -> None:
    files = _saved_tool(tmp_path)
    missing = client.post("/api/projects/outages/versions", {"manifest": files["manifest"]}, **auth)
    assert missing.status_code == 400 and missing.json()["error"].endswith("missing: weights")

    wrong = client.post("/api/projects/outages/versions", _saved_tool(tmp_path, "chatbot", "reply"), **auth)
    assert wrong.status_code == 400 and wrong.json()["error"].startswith("the model was not kept: tool.json")
    assert not ModelUpload.objects.exists()


def test_promoting_a_version_deleted_meanwhile_is_409(client, project, auth, monkeypatch) -> None:
    """The race itself is played out in test_version_races; here the version's lock finds it gone."""
    from annotate.models import ModelVersionQuerySet

    current = project.current_version_id
    spare = ModelVersion.objects.allocate(project, label="spare", trained=False)
    monkeypatch.setattr(ModelVersionQuerySet, "lock", lambda self, pk, no_key=False: False)

    response = client.post(f"/api/versions/{spare.pk}/promote", **auth)

    assert response.status_code == 409 and response.json() == {"error": "spare has been deleted"}
    project.refresh_from_db()
    assert project.current_version_id == current


def test_resume_requeues_a_cancelled_job_and_continue_trains_a_finished_one_further(client, project, reviewed,
                                                                                   auth) -> None:
    job_url = post(client, "/api/projects/outages/jobs", {"epochs": 1, "minibatch_size": 4}, auth)["Location"]
    client.post(f"{job_url}/cancel", **auth)

    resumed = client.post(f"{job_url}/resume", **auth)
    again = client.post(f"{job_url}/resume", **auth)

    assert resumed.status_code == 200 and resumed.json()["state"] == "PENDING"
    assert again.status_code == 409 and again.json() == {
        "error": "only a cancelled or failed job can be resumed", "state": "PENDING"}
    early = post(client, f"{job_url}/continue", {"extra_epochs": 2}, auth)
    assert early.status_code == 409 and early.json()["error"] == "only a succeeded job can be continued"

    job = TrainingJob.objects.get()
    runner.train(job.pk, "worker-a")
    continued = post(client, f"{job_url}/continue", {"extra_epochs": 2}, auth)

    assert continued.status_code == 200
    assert continued.json()["state"] == "PENDING" and continued.json()["settings"]["epochs"] == 3


@pytest.mark.parametrize("body", [{}, {"extra_epochs": 0}, {"extra_epochs": "2"}, {"extra_epochs": True},
                                  {"extra_epochs": 10_001}, {"extra_epochs": 2, "lr": 1}, [2]])
def test_continue_needs_a_whole_number_of_extra_epochs(client, project, reviewed, auth, body) -> None:
    job_url = post(client, "/api/projects/outages/jobs", {"epochs": 1}, auth)["Location"]

    response = post(client, f"{job_url}/continue", body, auth)

    assert response.status_code == 400
    assert response.json() == {"error": 'expected {"extra_epochs": n} with n a whole number from 1 to 10000'}
    assert TrainingJob.objects.get().epochs == 1
