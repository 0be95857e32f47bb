"""The data model: roles and reach, model version directories, tokens, and the artifact storage layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from annotate import queue, storage
from annotate.models import ApiToken, ItemStatus, ModelVersion, Project
from tests.annotate.conftest import make_ready_items, project_admin_form

pytestmark = pytest.mark.django_db


def test_roles_of_members_staff_and_outsiders(project, reviewer, project_admin, outsider, django_user_model) -> None:
    staff = django_user_model.objects.create_user("stella", is_staff=True)

    assert project.role_of(reviewer) == "reviewer"
    assert project.role_of(project_admin) == "admin"
    assert project.role_of(staff) == "admin"
    assert project.role_of(outsider) is None
    assert project.is_member(reviewer) and not project.is_admin(reviewer)


def test_anonymous_user_reaches_nothing(project) -> None:
    from django.contrib.auth.models import AnonymousUser

    assert project.role_of(AnonymousUser()) is None
    assert not Project.objects.for_user(AnonymousUser()).exists()


def test_for_user_lists_only_member_projects(project, reviewer, outsider, project_admin) -> None:
    Project.objects.create(slug="secret", name="Secret", tool="decision", mode="rank")

    assert list(Project.objects.for_user(reviewer)) == [project]
    assert list(Project.objects.for_user(outsider)) == []
    assert list(Project.objects.administered_by(project_admin)) == [project]
    assert list(Project.objects.administered_by(reviewer)) == []


def test_project_clean_rejects_unknown_tool_and_mode(db) -> None:
    with pytest.raises(ValidationError, match="unknown tool 'oracle'"):
        Project(slug="x", name="x", tool="oracle", mode="rank").full_clean()
    with pytest.raises(ValidationError, match="decision has no mode 'reply'"):
        Project(slug="x", name="x", tool="decision", mode="reply").full_clean()


def test_source_names_project_item_and_reviewer(project, reviewer) -> None:
    assert project.source_for(7, reviewer) == "review:outages/7/rita"


def test_version_directory_is_named_by_its_id(project, settings) -> None:
    version = ModelVersion.objects.allocate(project, label="v2", trained=True)

    assert version.directory == f"models/{version.pk}"
    assert version.path == Path(settings.TC_ARTIFACT_DIR) / "models" / str(version.pk)
    assert version.path.is_dir() and not version.is_materialized
    assert (version.tool, version.mode) == ("decision", "rank")


def test_token_key_is_stored_only_hashed(project, reviewer) -> None:
    token, key = ApiToken.objects.issue(reviewer, name="laptop")

    assert key.startswith("tca_") and key not in token.key_hash
    assert ApiToken.objects.authenticate(key) == token
    assert ApiToken.objects.authenticate(key + "x") is None
    assert ApiToken.objects.authenticate("") is None


def test_token_of_inactive_user_does_not_authenticate(project, reviewer) -> None:
    _, key = ApiToken.objects.issue(reviewer)
    reviewer.is_active = False
    reviewer.save()

    assert ApiToken.objects.authenticate(key) is None


@pytest.mark.parametrize(("kind", "pk"), [("../etc", 1), ("models", 0), ("models", "1"), ("models", -3), ("x", 1)])
def test_storage_refuses_anything_but_kind_and_positive_id(kind, pk) -> None:
    with pytest.raises(ValueError):
        storage.artifact_dir(kind, pk)


@pytest.mark.parametrize("name", ["models/../../etc", "/etc/passwd", "models/1/../2", "models/"])
def test_storage_resolve_refuses_paths(name) -> None:
    with pytest.raises(ValueError):
        storage.resolve(name)


def test_write_once_refuses_to_replace(tmp_path) -> None:
    path = storage.write_once(tmp_path / "a" / "manifest.json", b"{}")

    with pytest.raises(FileExistsError):
        storage.write_once(path, b"[]")
    assert path.read_bytes() == b"{}"
    assert [p.name for p in path.parent.iterdir()] == ["manifest.json"]


def test_write_once_takes_chunks_and_stops_at_its_limit(tmp_path) -> None:
    path = storage.write_once(tmp_path / "model" / "weights", iter([b"ab", b"cd"]), max_bytes=4)
    assert path.read_bytes() == b"abcd"

    with pytest.raises(storage.TooLarge):
        storage.write_once(path.parent / "big", iter([b"ab", b"cd", b"e"]), max_bytes=4)
    assert sorted(p.name for p in path.parent.iterdir()) == ["weights"]  # no partial file, no temporary


def test_the_django_admin_keeps_a_projects_tool_mode_and_slug(admin_client, admin_user, rf, project) -> None:
    """Its items' inputs, predictions and model versions are the tool's: switching it would strand every one. Its
    pages, API calls and answers' provenance name the slug, which the site's settings page fixes too."""
    url = reverse("admin:annotate_project_change", args=[project.pk])
    page = admin_client.get(url).content.decode()
    assert not any(f'name="{name}"' in page for name in ("tool", "mode", "slug")) and "decision" in page
    assert project.slug in page and 'name="overlap"' in page
    added = admin_client.get(reverse("admin:annotate_project_add")).content.decode()
    assert 'name="tool"' in added and 'name="mode"' in added and 'name="slug"' in added

    request = rf.post("/")
    request.user = admin_user
    form = project_admin_form(request, project, name="Renamed", slug="elsewhere")
    assert form.is_valid(), form.errors
    form.save()

    project.refresh_from_db()
    assert (project.name, project.slug) == ("Renamed", "outages")


def test_the_django_admin_checks_a_projects_configuration_as_the_site_does(rf, project, django_user_model) -> None:
    """Every submit, import and model of the project reads it: one Django's admin let through broke them all."""
    request = rf.post("/")
    request.user = django_user_model.objects.create_superuser("root", password="a-long-password")

    form = project_admin_form(request, project, configuration='{"depth": 3}')

    assert not form.is_valid()
    assert "depth" in " ".join(form.errors["configuration"])
    project.refresh_from_db()
    assert project.configuration == {"dim": 8, "buckets": 64}


def test_the_django_admin_shows_answers_and_their_history_without_changing_them(admin_client, project,
                                                                               reviewer) -> None:
    """An answer changed or deleted there kept no revision and left its item's count of answers wrong."""
    (item,) = make_ready_items(project, [0.5])
    assert queue.claim_next(project, reviewer) == item
    answer = queue.submit(item, reviewer, "db").answer
    revision = answer.revisions.get()

    for name, pk in (("answer", answer.pk), ("answerrevision", revision.pk)):
        page = admin_client.get(reverse(f"admin:annotate_{name}_change", args=[pk]))
        assert page.status_code == 200 and b"db" in page.content
        assert b'name="target"' not in page.content and b'name="_save"' not in page.content
        assert admin_client.post(reverse(f"admin:annotate_{name}_change", args=[pk]), {"target": '"dns"'}
                                 ).status_code == 403
        assert admin_client.post(reverse(f"admin:annotate_{name}_delete", args=[pk]), {"post": "yes"}
                                 ).status_code == 403
        assert admin_client.get(reverse(f"admin:annotate_{name}_add")).status_code == 403
    answer.refresh_from_db()
    assert (answer.target, answer.revisions.count()) == ("db", 1)


def test_the_django_admin_edits_a_model_versions_label_only(admin_client, project) -> None:
    version = project.current_version
    url = reverse("admin:annotate_modelversion_change", args=[version.pk])
    page = admin_client.get(url).content.decode()
    assert 'name="label"' in page
    assert not any(f'name="{name}"' in page for name in ("tool", "mode", "trained", "project", "metrics"))

    admin_client.post(url, {"label": "first try", "tool": "scene", "trained": "on"})

    version.refresh_from_db()
    assert (version.label, version.tool, version.trained) == ("first try", "decision", False)
    assert admin_client.get(reverse("admin:annotate_modelversion_add")).status_code == 403


def test_the_django_admin_adds_no_claim_or_adjudication_and_changes_no_claim(admin_client, project, reviewer,
                                                                             second_reviewer) -> None:
    """A claim added or changed there could hold an item past its overlap; an adjudication added there skipped
    its checks and history. A claim deleted there frees its place at once."""
    (item,) = make_ready_items(project, [0.5])
    assert queue.claim_next(project, reviewer) == item
    claim = item.claims.get()
    for name in ("claim", "adjudication"):
        assert admin_client.get(reverse(f"admin:annotate_{name}_add")).status_code == 403
    url = reverse("admin:annotate_claim_change", args=[claim.pk])
    assert admin_client.get(url).status_code == 200
    assert admin_client.post(url, {"expires_at_0": "2099-01-01", "expires_at_1": "00:00"}).status_code == 403

    admin_client.post(reverse("admin:annotate_claim_delete", args=[claim.pk]), {"post": "yes"})

    assert not item.claims.exists()
    item.refresh_from_db()
    assert (item.claimed_by, item.claim_expires_at) == (None, None)
    assert queue.claim_next(project, second_reviewer) == item


def test_the_django_admin_keeps_an_item_in_its_project(admin_client, project) -> None:
    """Its answers carry the project too (`Answer.project`); moving the item alone would split them. Its inputs
    and its count of answers go with its answers too."""
    item = make_ready_items(project, [0.5])[0]
    page = admin_client.get(reverse("admin:annotate_item_change", args=[item.pk]))
    assert page.status_code == 200
    assert b'name="project"' not in page.content and b"Outages" in page.content
    assert not any(f'name="{name}"'.encode() in page.content
                   for name in ("inputs", "final_answers", "claimed_by", "claim_expires_at_0"))
    assert b'name="status"' in page.content  # a repair by hand stays possible
    assert b'name="project"' in admin_client.get(reverse("admin:annotate_item_add")).content
    # Its prediction and confidence are its model's: another project's prediction and a confidence of 7 were kept.
    assert b'name="prediction"' not in page.content and b'name="confidence"' not in page.content


def test_an_item_added_in_the_django_admin_is_checked_as_an_import_and_predicted(
        admin_client, project, django_capture_on_commit_callbacks, monkeypatch) -> None:
    sent = []
    monkeypatch.setattr("annotate.tasks.predict_items.delay", lambda *args: sent.append(args))
    url = reverse("admin:annotate_item_add")

    refused = admin_client.post(url, {"project": project.pk, "inputs": '"garbage"'})
    assert refused.status_code == 200 and b"errorlist" in refused.content and not project.items.exists()
    good = {"question": "q", "evidence": [], "hypotheses": [{"id": "x", "text": "one"}]}
    with django_capture_on_commit_callbacks(execute=True):
        added = admin_client.post(url, {"project": project.pk, "inputs": json.dumps(good)})

    assert added.status_code == 302
    item = project.items.get()
    assert item.status == ItemStatus.PENDING and sent == [(project.pk, [item.pk], None)]


def test_api_tokens_are_issued_by_the_command_and_revoked_in_the_django_admin(admin_client, project) -> None:
    """A token added in the admin had no key, and a second one broke the unique key hash (a 500)."""
    from django.test import Client

    token, key = ApiToken.objects.issue(project.memberships.first().user, name="laptop")
    assert admin_client.get(reverse("admin:annotate_apitoken_add")).status_code == 403
    assert Client().get(reverse("api:projects"), HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200

    page = admin_client.post(reverse("admin:annotate_apitoken_changelist"),
                             {"action": "revoke", "_selected_action": [token.pk]}, follow=True)

    assert "Revoked 1 token: requests with it now get 401." in page.content.decode()
    assert Client().get(reverse("api:projects"), HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 401


def test_a_claim_is_named_in_the_viewers_time_zone(project, reviewer) -> None:
    """It showed UTC with no zone beside the admin's own columns in the viewer's zone."""
    from datetime import UTC, datetime

    from django.utils import timezone

    from annotate.models import Claim

    item = make_ready_items(project, [0.5])[0]
    claim = Claim(item=item, reviewer=reviewer, expires_at=datetime(2026, 12, 5, 20, 16, 28, tzinfo=UTC))
    with timezone.override("Asia/Tokyo"):
        assert str(claim) == f"{reviewer} on {item.pk} until 05:16:28 JST"
