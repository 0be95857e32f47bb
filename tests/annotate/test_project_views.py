"""Home, project, settings, import and export pages: what each role sees and what each action stores."""

from __future__ import annotations

import html
import json

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from annotate import imports, queue
from annotate.models import (
    Answer,
    AnswerKind,
    Claim,
    ExperienceUpload,
    Export,
    ExportState,
    Item,
    ItemImport,
    ItemStatus,
    Membership,
    Project,
    Role,
    UploadState,
)
from tests.annotate.conftest import DECISION_INPUT, project_admin_form
from tests.annotate.conftest import make_ready_items as ready_items

HX = {"HTTP_HX_REQUEST": "true"}


def _jsonl(*records) -> SimpleUploadedFile:
    body = "\n".join(json.dumps(r) for r in records).encode()
    return SimpleUploadedFile("items.jsonl", body, content_type="application/jsonl")


def _answer_all(items, reviewer) -> None:
    for item in items:
        Answer.objects.create(item=item, reviewer=reviewer, kind=AnswerKind.TARGET, target="db",
                              source=item.project.source_for(item.pk, reviewer))


@pytest.mark.django_db
def test_home_lists_members_projects_with_progress(client, project, reviewer, outsider) -> None:
    ready_items(project, [0.1, 0.2])
    Project.objects.create(slug="hidden", name="Hidden project", tool="decision", mode="rank")
    client.force_login(reviewer)

    page = client.get(reverse("home")).content.decode()

    assert "Outages" in page and "Hidden project" not in page
    assert "0 of 2 items finished" in page
    assert reverse("review_next", args=[project.slug]) in page
    assert 'id="project-filter"' not in page  # a find box only where there are many projects

    for n in range(6):
        more = Project.objects.create(slug=f"more-{n}", name=f"More {n}", tool="decision", mode="rank")
        Membership.objects.create(project=more, user=reviewer, role=Role.REVIEWER)
    assert 'id="project-filter"' in client.get(reverse("home")).content.decode()


@pytest.mark.django_db
def test_home_counts_each_projects_items_by_status_in_the_same_queries_for_any_number(
        client, project, reviewer, django_assert_num_queries) -> None:
    done, skipped, ready = ready_items(project, [0.1, 0.2, 0.3])
    Item.objects.filter(pk=done.pk).update(status=ItemStatus.DONE)
    Item.objects.filter(pk=skipped.pk).update(status=ItemStatus.SKIPPED)
    client.force_login(reviewer)
    client.get(reverse("home"))  # the session and the user, as on any later visit
    with CaptureQueriesContext(connection) as one:
        page = client.get(reverse("home")).content.decode()
    assert "2 of 3 items finished" in page
    queries = len(one.captured_queries)  # read from the connection's log, which the next request empties

    for n in range(3):
        other = Project.objects.create(slug=f"more-{n}", name=f"More {n}", tool="decision", mode="rank")
        Membership.objects.create(project=other, user=reviewer, role=Role.ADMIN if n else Role.REVIEWER)
        ready_items(other, [0.5] * (n + 1))
    client.get(reverse("home"))  # notes in the session, once, that the reviewer now administers a project
    with django_assert_num_queries(queries):
        page = client.get(reverse("home")).content.decode()
    assert "2 of 3 items finished" in page and "0 of 3 items finished" in page and "0 of 1 item finished" in page
    assert page.count(">admin<") == 2


@pytest.mark.django_db
def test_home_says_why_there_is_nothing_to_review_instead_of_offering_an_empty_queue(client, project,
                                                                                      reviewer) -> None:
    def card(page: str, slug: str) -> str:
        start = page.index(f'href="/projects/{slug}/"')
        return page[start:page.index("</article>", start)]

    finished, waiting = ready_items(project, [0.1, 0.2])
    Item.objects.filter(pk=finished.pk).update(status=ItemStatus.DONE)
    Item.objects.filter(pk=waiting.pk).update(status=ItemStatus.PENDING)
    done = Project.objects.create(slug="done", name="Done", tool="decision", mode="rank")
    empty = Project.objects.create(slug="empty", name="Empty", tool="decision", mode="rank")
    for other in (done, empty):
        Membership.objects.create(project=other, user=reviewer, role=Role.ADMIN)
    Item.objects.filter(pk__in=[i.pk for i in ready_items(done, [0.3])]).update(status=ItemStatus.SKIPPED)
    client.force_login(reviewer)

    page = client.get(reverse("home")).content.decode()

    assert "None ready for review: 1 waits for a prediction." in card(page, project.slug)
    assert "Every item is finished." in card(page, "done")
    assert "No items yet: import some on the project page." in card(page, "empty")
    assert "Start reviewing" not in page and page.count(">Open project</a>") == 3
    Item.objects.filter(pk=waiting.pk).update(status=ItemStatus.READY)
    page = client.get(reverse("home")).content.decode()
    assert "Start reviewing" in card(page, project.slug) and page.count(">Open project</a>") == 2


@pytest.mark.django_db
def test_the_project_page_says_why_there_is_nothing_to_review_instead_of_offering_an_empty_queue(
        client, project, reviewer, project_admin) -> None:
    url = reverse("project_detail", args=[project.slug])
    client.force_login(project_admin)
    assert "No items yet: import some below." in client.get(url).content.decode()
    client.force_login(reviewer)
    empty = client.get(url).content.decode()
    assert "No items yet." in empty and 'id="start-reviewing"' not in empty  # reviewers cannot import

    first, second = ready_items(project, [0.1, 0.2])
    Item.objects.filter(pk=first.pk).update(status=ItemStatus.DONE)
    assert 'id="start-reviewing"' in client.get(url).content.decode()
    Item.objects.filter(pk=second.pk).update(status=ItemStatus.PENDING)
    waiting = client.get(url).content.decode()
    assert "None ready for review: 1 waits for a prediction." in waiting and 'id="start-reviewing"' not in waiting
    Item.objects.filter(pk=second.pk).update(status=ItemStatus.SKIPPED)
    finished = client.get(url).content.decode()
    assert "Every item is finished." in finished and 'id="start-reviewing"' not in finished


@pytest.mark.django_db
def test_project_page_shows_admin_tools_only_to_admins(client, project, reviewer, project_admin) -> None:
    ready_items(project, [0.5])
    client.force_login(reviewer)
    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    assert "Pick the cause." in page and "Start reviewing" in page
    assert "Import items" not in page and "Export answers" not in page

    client.force_login(project_admin)
    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    assert "Import items" in page and "Export answers" in page and "Upload experience file" in page


@pytest.mark.django_db
def test_reviewer_is_refused_admin_actions(client, project, reviewer) -> None:
    client.force_login(reviewer)

    assert client.get(reverse("project_settings", args=[project.slug])).status_code == 403
    assert client.post(reverse("project_import", args=[project.slug]),
                       {"file": _jsonl({"inputs": DECISION_INPUT})}).status_code == 403
    assert client.post(reverse("export_create", args=[project.slug]),
                       {"format": "jsonl", "minibatch_size": 8}).status_code == 403
    assert client.post(reverse("member_add", args=[project.slug]),
                       {"username": "rita", "role": "admin"}).status_code == 403
    assert not Item.objects.exists() and not Export.objects.exists()
    assert Membership.objects.get(project=project, user=reviewer).role == Role.REVIEWER


@pytest.mark.django_db
def test_outsider_gets_404_on_admin_pages(client, project, outsider) -> None:
    client.force_login(outsider)

    assert client.get(reverse("project_settings", args=[project.slug])).status_code == 404
    assert client.post(reverse("export_create", args=[project.slug]), {}).status_code == 404


@pytest.mark.django_db
def test_import_upload_is_queued_and_its_row_polls_until_the_worker_imported_it(
        client, project, project_admin, django_capture_on_commit_callbacks, monkeypatch) -> None:
    from annotate import tasks

    queued = []
    monkeypatch.setattr(tasks.import_item_file, "delay", lambda pk: queued.append(pk))
    client.force_login(project_admin)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("project_import", args=[project.slug]),
                               {"file": _jsonl({"inputs": DECISION_INPUT}, {"inputs": DECISION_INPUT})}, follow=True)

    page = response.content.decode()
    row = ItemImport.objects.get()
    assert queued == [row.pk] and row.state == UploadState.PENDING and row.path.exists()
    assert "items.jsonl uploaded: every line is being checked" in page
    assert "Importing" in page and reverse("import_status", args=[project.slug, row.pk]) in page  # polls
    assert not Item.objects.exists()  # the worker imports

    assert imports.run_import(row.pk) == UploadState.ACCEPTED
    status = client.get(reverse("import_status", args=[project.slug, row.pk]), HTTP_HX_REQUEST="true")
    assert status.status_code == 286  # htmx stops polling
    assert "Imported 2 items" in status.content.decode() and "hx-get" not in status.content.decode()
    assert Item.objects.filter(project=project).count() == 2


@pytest.mark.django_db
def test_import_with_a_bad_line_imports_nothing_and_its_row_names_the_line(client, project, project_admin) -> None:
    client.force_login(project_admin)
    body = SimpleUploadedFile("items.jsonl", json.dumps({"inputs": DECISION_INPUT}).encode() + b"\n{not json\n")
    client.post(reverse("project_import", args=[project.slug]), {"file": body})

    imports.run_import(ItemImport.objects.get().pk)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    assert "Nothing imported" in page and "1 problem in the file" in page and "line 2: not valid JSON" in page
    assert not Item.objects.exists()


@pytest.mark.django_db
def test_import_status_is_for_the_projects_admins_only(client, project, project_admin, reviewer, outsider) -> None:
    row = imports.queue_import(project, project_admin, _jsonl({"inputs": DECISION_INPUT}), name="a.jsonl")
    url = reverse("import_status", args=[project.slug, row.pk])
    client.force_login(reviewer)
    assert client.get(url).status_code == 403
    client.force_login(outsider)
    assert client.get(url).status_code == 404
    other = Project.objects.create(name="Other", slug="other", tool=project.tool, mode=project.mode)
    Membership.objects.create(project=other, user=project_admin, role=Role.ADMIN)
    client.force_login(project_admin)
    assert client.get(reverse("import_status", args=[other.slug, row.pk])).status_code == 404  # not its project


@pytest.mark.django_db
def test_export_with_nothing_selected_says_so(client, project, project_admin) -> None:
    client.force_login(project_admin)

    response = client.post(reverse("export_create", args=[project.slug]),
                           {"format": "experience", "minibatch_size": 8}, follow=True)

    page = response.content.decode()
    assert "No reviewed answer matches these filters, so there is nothing to export: widen one" in page
    assert "export: no reviewed" not in page  # the command's and the API's wording, not the page's
    assert not Export.objects.exists()


@pytest.mark.django_db
def test_export_is_recorded_and_its_status_stops_polling_when_final(client, project, project_admin,
                                                                   reviewer, django_capture_on_commit_callbacks):
    _answer_all(ready_items(project, [0.1, 0.2]), reviewer)
    client.force_login(project_admin)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        client.post(reverse("export_create", args=[project.slug]), {"format": "jsonl", "minibatch_size": 8})
    export = Export.objects.get()
    assert (export.total, export.format, len(callbacks)) == (2, "jsonl", 1)

    status_url = reverse("export_status", args=[project.slug, export.pk])
    running = client.get(status_url, **HX)
    assert running.status_code == 200 and 'hx-trigger="every 1s"' in running.content.decode()
    assert client.get(reverse("export_download", args=[project.slug, export.pk])).status_code == 404

    Export.objects.filter(pk=export.pk).update(state=ExportState.FAILED, error="disk full")
    final = client.get(status_url, **HX)
    assert final.status_code == 286
    assert "disk full" in final.content.decode() and "hx-trigger" not in final.content.decode()


@pytest.mark.django_db
def test_export_downloads_as_archive(client, project, project_admin, reviewer) -> None:
    from annotate import export as exports

    _answer_all(ready_items(project, [0.1]), reviewer)
    export = exports.run(exports.create_export(project, project_admin, format="jsonl", enqueue=False))
    client.force_login(project_admin)

    response = client.get(reverse("export_download", args=[project.slug, export.pk]))

    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment;")
    assert b"".join(response.streaming_content)[:2] == b"PK"


@pytest.mark.django_db
@pytest.mark.django_db
def test_an_admin_removes_an_upload_and_others_cannot(client, project, project_admin, reviewer, outsider) -> None:
    from annotate import imports

    row = imports.upload_experience(project, project_admin, [b'{"format": "tensorcode-experience"}'], name="mine.json")
    url = reverse("upload_remove", args=[project.slug, row.pk])
    for user, status in ((outsider, 404), (reviewer, 403)):
        client.force_login(user)
        assert client.post(url, HTTP_HX_REQUEST="true").status_code == status
    client.force_login(project_admin)
    assert client.get(url).status_code == 405  # a link cannot remove anything
    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    assert f'hx-post="{url}"' in page and "hx-confirm=\"Remove mine.json?" in page

    response = client.post(url, HTTP_HX_REQUEST="true")

    assert response.status_code == 200 and "mine.json removed." in response.content.decode()
    assert not ExperienceUpload.objects.filter(pk=row.pk).exists()
    assert client.post(url).status_code == 404  # already gone


@pytest.mark.django_db
def test_removing_an_upload_needs_the_csrf_token(project, project_admin) -> None:
    from django.test import Client

    from annotate import imports

    row = imports.upload_experience(project, project_admin, [b'{"format": "tensorcode-experience"}'], name="mine.json")
    client = Client(enforce_csrf_checks=True)
    client.force_login(project_admin)

    assert client.post(reverse("upload_remove", args=[project.slug, row.pk])).status_code == 403
    assert ExperienceUpload.objects.filter(pk=row.pk).exists()


def test_uploaded_file_that_is_not_an_experience_is_refused(client, project, project_admin) -> None:
    client.force_login(project_admin)
    hostile = SimpleUploadedFile("evil.json", b'{"format": "pickle", "payload": "gASV"}')

    response = client.post(reverse("experience_upload", args=[project.slug]), {"experience": hostile}, follow=True)

    assert "not an experience file" in response.content.decode()
    assert not project.experience_uploads.exists()


@pytest.mark.django_db
def test_staff_creates_project_with_fresh_untrained_version(client, django_user_model) -> None:
    staff = django_user_model.objects.create_user("sue", password="x", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="add_project"))
    client.force_login(staff)

    response = client.post(reverse("project_create"), {
        "name": "Claims", "slug": "claims", "kind": "investigator/verification", "guidelines": "Be strict.",
        "configuration": '{"dim": 8}', "overlap": 1, "lease_seconds": 600,
    })

    assert response.status_code == 302
    project = Project.objects.get(slug="claims")
    assert (project.tool, project.mode, project.configuration) == ("investigator", "verification", {"dim": 8})
    assert project.current_version is not None and not project.current_version.trained
    assert project.role_of(staff) == Role.ADMIN


@pytest.mark.django_db
def test_project_create_rejects_bad_configuration_with_the_field_named(client, django_user_model) -> None:
    staff = django_user_model.objects.create_user("sue", password="x", is_staff=True, is_superuser=True)
    client.force_login(staff)

    response = client.post(reverse("project_create"), {
        "name": "Claims", "slug": "claims", "kind": "decision/rank", "configuration": '{"depth": 3}',
        "overlap": 1, "lease_seconds": 600,
    })

    assert response.status_code == 200
    assert "depth" in response.content.decode()
    assert not Project.objects.exists()


@pytest.mark.django_db
def test_project_create_refuses_a_slug_the_sites_addresses_take_and_a_lease_past_a_week(client,
                                                                                       django_user_model) -> None:
    """A project called `new` was created, and projects/new/ is the new project form: it could not be opened. A
    lease of 10^14 seconds was kept, and claiming then overflowed (a 500 for every reviewer)."""
    staff = django_user_model.objects.create_user("sue", password="x", is_staff=True, is_superuser=True)
    client.force_login(staff)

    response = client.post(reverse("project_create"), {
        "name": "New", "slug": "new", "kind": "decision/rank", "overlap": 1, "lease_seconds": 10**14})

    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert "'new' is part of the site's addresses (projects/new/); choose another." in page
    assert "Ensure this value is less than or equal to 604800." in page
    assert not Project.objects.exists()


@pytest.mark.django_db
def test_project_create_with_a_kind_not_offered_says_so_on_that_field(client, django_user_model) -> None:
    """The model's own tool and mode check must not crash the form, which has no "mode" field to file it under."""
    staff = django_user_model.objects.create_user("sue", password="x", is_staff=True, is_superuser=True)
    client.force_login(staff)

    response = client.post(reverse("project_create"), {
        "name": "Claims", "slug": "claims", "kind": "oracle/guess", "configuration": "[" * 100_000,
        "overlap": 1, "lease_seconds": 600,
    })

    assert response.status_code == 200
    page = response.content.decode()
    assert "Select a valid choice. oracle/guess is not one of the available choices." in page
    assert "Not valid JSON: nested too deeply." in page
    assert "unknown tool" not in page  # said once, by the field
    assert not Project.objects.exists()


@pytest.mark.django_db
def test_plain_reviewer_cannot_create_projects(client, reviewer) -> None:
    client.force_login(reviewer)

    assert client.get(reverse("project_create")).status_code == 403


@pytest.mark.django_db
def test_admin_adds_member_and_changes_guidelines(client, project, project_admin, outsider) -> None:
    client.force_login(project_admin)

    client.post(reverse("member_add", args=[project.slug]), {"username": "olga", "role": "reviewer"})
    client.post(reverse("project_settings", args=[project.slug]), {
        "name": "Outages", "guidelines": "New rules.", "configuration": '{"dim": 8, "buckets": 64}',
        "overlap": 2, "lease_seconds": 300,
    })

    project.refresh_from_db()
    assert project.role_of(outsider) == Role.REVIEWER
    assert (project.guidelines, project.overlap, project.lease_seconds) == ("New rules.", 2, 300)
    assert (project.tool, project.mode) == ("decision", "rank")


def _settings(overlap: int) -> dict:
    return {"name": "Outages", "guidelines": "Pick the cause.", "configuration": '{"dim": 8, "buckets": 64}',
            "overlap": overlap, "lease_seconds": 600}


@pytest.mark.django_db
def test_changing_the_overlap_on_the_settings_page_finishes_or_reopens_items_and_says_how_many(
        client, project, project_admin, reviewer, second_reviewer) -> None:
    project.overlap = 3
    project.save()
    twice, once = ready_items(project, [0.1, 0.2])
    for user in (reviewer, second_reviewer):
        assert queue.claim_next(project, user) == twice
        queue.submit(twice, user, "db")
    assert queue.claim_next(project, reviewer) == once
    queue.submit(once, reviewer, "db")
    client.force_login(project_admin)
    url = reverse("project_settings", args=[project.slug])

    page = client.post(url, _settings(overlap=2), follow=True).content.decode()

    assert "Project settings saved. 1 item already had 2 answers and is now finished." in page
    assert dict(Item.objects.filter(project=project).values_list("pk", "status")) == {
        twice.pk: ItemStatus.DONE, once.pk: ItemStatus.READY}

    page = client.post(url, _settings(overlap=3), follow=True).content.decode()

    assert "Project settings saved. 1 finished item with fewer than 3 answers went back to the queue." in page
    assert set(Item.objects.filter(project=project).values_list("status", flat=True)) == {ItemStatus.READY}

    page = client.post(url, _settings(overlap=1), follow=True).content.decode()  # below 2 answers: refused

    assert "Some items already have 2 answers; the overlap cannot be lower than that." in page
    page = client.post(url, {**_settings(overlap=1), "configuration": '{"depth": 3}'}).content.decode()
    assert "the overlap cannot be lower than that" in page and "unknown configuration field" in page  # both at once
    project.refresh_from_db()
    assert (project.overlap, project.configuration) == (3, {"dim": 8, "buckets": 64})
    assert set(Item.objects.filter(project=project).values_list("status", flat=True)) == {ItemStatus.READY}


@pytest.mark.django_db
def test_the_django_admin_applies_a_changed_overlap_too(rf, project, reviewer, django_user_model,
                                                       django_capture_on_commit_callbacks) -> None:
    from django.contrib.admin.sites import site

    project.overlap = 2
    project.save()
    (item,) = ready_items(project, [0.1])
    assert queue.claim_next(project, reviewer) == item
    queue.submit(item, reviewer, "db")
    request = rf.post("/")
    request.user = django_user_model.objects.create_superuser("root", password="a-long-password")
    form = project_admin_form(request, project, overlap=1)
    assert form.is_valid(), form.errors
    assert "overlap" in form.changed_data

    with django_capture_on_commit_callbacks(execute=True):  # applied once the admin's transaction commits
        site._registry[Project].save_model(request, form.save(commit=False), form, change=True)

    assert Item.objects.get(pk=item.pk).status == ItemStatus.DONE


@pytest.mark.django_db
def test_admin_sees_each_reviewers_progress(client, project, project_admin, reviewer, second_reviewer) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    _answer_all([first, second], reviewer)
    Answer.objects.create(item=first, reviewer=second_reviewer, kind=AnswerKind.SKIP, skip_reason="unclear",
                          source=project.source_for(first.pk, second_reviewer))
    client.force_login(project_admin)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()

    items = reverse("item_list", args=[project.slug])
    assert (f'<tr><td><a href="{items}?reviewer=rita" title="The items rita answered, skipped or left as drafts">'
            "rita</a></td><td>2</td><td>0</td><td>0</td>") in page  # each name opens their items
    assert ">sam</a></td><td>0</td><td>1</td><td>0</td>" in page


@pytest.mark.django_db
def test_export_filters_by_confidence_and_refuses_an_impossible_range(client, project, project_admin,
                                                                      reviewer) -> None:
    _answer_all(ready_items(project, [0.1, 0.9]), reviewer)
    client.force_login(project_admin)
    url = reverse("export_create", args=[project.slug])

    refused = client.post(url, {"format": "jsonl", "minibatch_size": 8, "confidence_min": 0.8,
                                "confidence_max": 0.2})
    assert refused.status_code == 400
    page = refused.content.decode()
    assert "This is below the minimum, 0.8: no item can match." in page
    assert 'name="confidence_min" value="0.8"' in page and 'name="confidence_max" value="0.2"' in page
    assert not Export.objects.exists()

    client.post(url, {"format": "jsonl", "minibatch_size": 8, "confidence_min": 0.5})
    export = Export.objects.get()
    assert (export.filters, export.total) == ({"confidence_min": 0.5}, 1)


@pytest.mark.django_db
def test_export_by_days_keeps_the_form_as_sent_when_the_days_or_the_answers_select_nothing(
        client, project, project_admin, reviewer) -> None:
    (item,) = ready_items(project, [0.1])
    _answer_all([item], reviewer)
    client.force_login(project_admin)
    url = reverse("export_create", args=[project.slug])
    today = timezone.localdate()

    backwards = client.post(url, {"format": "jsonl", "minibatch_size": 8, "since": "2026-03-10",
                                  "until": "2026-03-09"})
    assert backwards.status_code == 400
    page = backwards.content.decode()
    assert "This is before the first day, 2026-03-10: no answer can match." in page
    assert 'value="2026-03-10"' in page and 'value="2026-03-09"' in page and 'value="8"' in page

    none = client.post(url, {"format": "jsonl", "minibatch_size": 8, "until": "2026-03-09"})
    assert none.status_code == 400
    assert "nothing to export" in none.content.decode() and 'value="2026-03-09"' in none.content.decode()
    assert not Export.objects.exists()

    client.post(url, {"format": "jsonl", "minibatch_size": 8, "since": today, "until": today})
    assert Export.objects.get().total == 1


@pytest.mark.django_db
def test_removing_a_reviewer_who_holds_a_claim_says_so_and_frees_the_item(client, project, project_admin, reviewer,
                                                                          second_reviewer) -> None:
    (item,) = ready_items(project, [0.1])
    assert queue.claim_next(project, reviewer) == item
    membership = project.memberships.get(user=reviewer)
    client.force_login(project_admin)

    page = client.post(reverse("member_remove", args=[project.slug, membership.pk]), follow=True).content.decode()

    assert "rita was removed from Outages. The 1 item they were labelling went back to the queue" in page
    assert queue.claim_next(project, second_reviewer) == item
    client.force_login(reviewer)  # rita's open page submits after all: the project is gone for her, nothing stored
    response = client.post(reverse("item_submit", args=[project.slug, item.pk]), {"choice": "db"}, **HX)
    assert response.status_code == 404
    assert not Answer.objects.filter(reviewer=reviewer).exists()


@pytest.mark.django_db
def test_memberships_deleted_together_in_djangos_admin_free_their_items(client, project, reviewer, second_reviewer,
                                                                        project_admin, django_user_model) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    assert queue.claim_next(project, reviewer) == first
    assert queue.claim_next(project, second_reviewer) == second
    client.force_login(django_user_model.objects.create_superuser("root", password="a-long-password"))
    chosen = [m.pk for m in project.memberships.filter(user__in=[reviewer, second_reviewer])]

    client.post(reverse("admin:annotate_membership_changelist"),
                {"action": "delete_selected", "_selected_action": chosen, "post": "yes"})

    assert not project.memberships.filter(pk__in=chosen).exists()
    assert not Claim.objects.exists()  # both items are back in the queue at once
    assert queue.claim_next(project, project_admin) == first


@pytest.mark.django_db
def test_counts_at_team_scale_are_grouped_by_thousands(client, project, project_admin, reviewer) -> None:
    items = Item.objects.bulk_create(Item(project=project, inputs=DECISION_INPUT) for _ in range(1234))
    Answer.objects.bulk_create(Answer(item=item, project=project, reviewer=reviewer, kind=AnswerKind.DRAFT,
                                      target="db", source="s") for item in items)
    client.force_login(project_admin)

    home = client.get(reverse("home")).content.decode()
    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    progress = client.get(reverse("project_progress", args=[project.slug])).content.decode()

    assert "0 of 1,234 items finished" in home
    assert "<strong>1,234</strong>" in page and "<strong>1,234</strong>" in progress
    assert ">rita</a></td><td>0</td><td>0</td><td>1,234</td>" in page  # the admin's table of reviewers
    assert 'max="1234"' in page  # numbers a browser reads stay plain


@pytest.mark.django_db
def test_an_accepted_uploads_counts_are_grouped_by_thousands(client, project, project_admin) -> None:
    row = ExperienceUpload.objects.create(project=project, uploaded_by=project_admin, original_name="big.json",
                                          state="ACCEPTED", summary={"supervisions": 12345, "calls": 1000})
    client.force_login(project_admin)
    page = client.get(reverse("upload_status", args=[project.slug, row.pk]), HTTP_HX_REQUEST="true")
    assert "12,345 supervision records in 1,000 calls" in page.content.decode()


@pytest.mark.django_db
def test_an_admin_adds_a_team_at_once_and_an_unknown_name_adds_nobody(client, project, project_admin,
                                                                       django_user_model) -> None:
    for name in ("tom", "uma", "vic"):
        django_user_model.objects.create_user(name, password="a-long-password")
    client.force_login(project_admin)
    url = reverse("member_add", args=[project.slug])

    refused = client.post(url, {"username": "tom, nobody\numa ghost", "role": "reviewer"})
    assert refused.status_code == 400
    assert "No user named &#x27;nobody&#x27;, &#x27;ghost&#x27;; nobody was added." in refused.content.decode()
    assert not Membership.objects.filter(project=project, user__username="tom").exists()

    page = client.post(url, {"username": "tom, uma\nvic  tom;rita", "role": "reviewer"}, follow=True)
    assert "4 users are now reviewers of Outages: tom, uma, vic, rita." in page.content.decode()
    assert set(project.memberships.filter(role=Role.REVIEWER).values_list("user__username", flat=True)) >= {
        "tom", "uma", "vic", "rita"}

    page = client.post(url, {"username": "uma", "role": "admin"}, follow=True)
    assert project.memberships.get(user__username="uma").role == Role.ADMIN
    assert "uma is now a project admin of Outages." in page.content.decode()  # it said "a admin"
    assert client.post(url, {"username": " , ", "role": "reviewer"}).status_code == 400


@pytest.mark.django_db
def test_settings_lists_admins_first_then_names_as_people_read_them(client, project, project_admin,
                                                                     django_user_model) -> None:
    for name in ("r10", "R2", "r1"):
        Membership.objects.create(project=project, user=django_user_model.objects.create_user(name),
                                  role=Role.REVIEWER)
    client.force_login(project_admin)

    members = client.get(reverse("project_settings", args=[project.slug])).context["members"]

    names = [m.user.get_username() for m in members]
    assert names[0] == project_admin.get_username()
    assert [n for n in names if n in ("r10", "R2", "r1")] == ["r1", "R2", "r10"]


@pytest.mark.django_db
def test_settings_page_heads_like_the_other_project_pages(client, project, project_admin) -> None:
    """"Settings" over the project's name, which leads back to it, and a title that starts with the page."""
    client.force_login(project_admin)

    page = client.get(reverse("project_settings", args=[project.slug])).content.decode()

    assert "<h1>Settings</h1>" in page
    assert f'<a href="{reverse("project_detail", args=[project.slug])}">{project.name}</a>' in page
    assert f"<title>Settings · {project.name} · tensorcode annotate</title>" in page


@pytest.mark.django_db
def test_older_exports_and_uploads_are_paged_not_missing(client, project, project_admin) -> None:
    """The project page showed the newest five of each: an older export could not be downloaded there, nor an
    older experience upload removed, though each accepted one goes on being trained on."""
    from datetime import timedelta

    from annotate.models import ExperienceUpload, Export, ExportState, UploadState

    start = timezone.now() - timedelta(days=10)
    exports = Export.objects.bulk_create(Export(project=project, state=ExportState.SUCCEEDED, created_at=start +
                                                timedelta(hours=n)) for n in range(7))
    uploads = ExperienceUpload.objects.bulk_create(
        ExperienceUpload(project=project, state=UploadState.ACCEPTED, original_name=f"run-{n}.json",
                         created_at=start + timedelta(hours=n)) for n in range(6))
    url = reverse("project_detail", args=[project.slug])
    client.force_login(project_admin)

    first = client.get(url).content.decode()
    assert 'Exports <small>7</small>' in first and 'Experience uploads <small>6</small>' in first
    assert "1–5 of 7 exports" in first and "1–5 of 6 uploads" in first
    assert f'id="export-{exports[0].pk}"' not in first and "run-0.json" not in first
    assert 'href="?uploads=2#uploads-title">Older →</a>' in first

    older = client.get(url, {"exports": 2, "uploads": 2}).content.decode()
    assert f'id="export-{exports[0].pk}"' in older and f'id="export-{exports[1].pk}"' in older
    assert "run-0.json" in older and reverse("upload_remove", args=[project.slug, uploads[0].pk]) in older
    assert 'href="?exports=1&amp;uploads=2#exports-title">← Newer</a>' in older  # the uploads' page stays
    for junk in ("0", "-1", "nan", "99999999999999999999"):
        assert client.get(url, {"exports": junk, "uploads": junk}).status_code == 200
