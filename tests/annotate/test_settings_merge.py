"""Two admins editing a project's settings at once: each keeps what they changed, and a setting both changed
differently is refused, not silently overwritten."""

from __future__ import annotations

import threading
from datetime import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from annotate.admin import MembershipInline
from annotate.models import Membership, ModelVersion, Project, Role
from tests.annotate.races import Other


@pytest.fixture
def second_admin(django_user_model, project):
    user = django_user_model.objects.create_user("bea", password="a-long-password")
    Membership.objects.create(project=project, user=user, role=Role.ADMIN)
    return user


def _form_as_shown(client, project: Project) -> dict:
    """The settings form's fields as the page showed them (the hidden `loaded` among them)."""
    form = client.get(reverse("project_settings", args=[project.slug])).context["form"]
    return {name: form[name].value() for name in ("name", "guidelines", "configuration", "overlap",
                                                   "lease_seconds", "loaded")}


def _save(client, project: Project, data: dict):
    return client.post(reverse("project_settings", args=[project.slug]), data, follow=True)


@pytest.mark.django_db
def test_two_admins_changing_different_settings_both_keep_theirs(client, project, project_admin,
                                                                  second_admin) -> None:
    client.force_login(project_admin)
    ada = _form_as_shown(client, project)
    client.force_login(second_admin)
    bea = _form_as_shown(client, project)

    client.force_login(project_admin)
    assert _save(client, project, {**ada, "guidelines": "Pick the root cause, not a symptom."}).status_code == 200
    client.force_login(second_admin)
    page = _save(client, project, {**bea, "overlap": 2}).content.decode()

    project.refresh_from_db()
    assert (project.guidelines, project.overlap) == ("Pick the root cause, not a symptom.", 2)
    assert "Project settings saved. Kept what another admin saved meanwhile: the guidelines." in page


@pytest.mark.django_db
def test_a_setting_both_admins_changed_differently_is_refused_and_the_second_save_stores_it(
        client, project, project_admin, second_admin) -> None:
    client.force_login(project_admin)
    ada = _form_as_shown(client, project)
    client.force_login(second_admin)
    bea = _form_as_shown(client, project)
    client.force_login(project_admin)
    _save(client, project, {**ada, "guidelines": "Ada's rules."})

    client.force_login(second_admin)
    response = _save(client, project, {**bea, "guidelines": "Bea's rules.", "lease_seconds": 300})

    assert response.status_code == 409
    page = response.content.decode()
    assert "Nothing was saved: another admin saved these settings since you opened the page." in page
    assert "Another admin changed this since you opened the page; it now holds “Ada&#x27;s rules.”" in page
    assert "Bea&#x27;s rules.</textarea>" in page  # her text is still in the form
    project.refresh_from_db()
    assert (project.guidelines, project.lease_seconds) == ("Ada's rules.", 600)  # nothing of hers stored

    form = response.context["form"]
    again = {name: form[name].value() for name in bea}
    assert _save(client, project, again).status_code == 200
    project.refresh_from_db()
    assert (project.guidelines, project.lease_seconds) == ("Bea's rules.", 300)


@pytest.mark.django_db
def test_a_refused_save_shows_what_the_other_admin_alone_changed_and_saving_again_keeps_it(
        client, project, project_admin, second_admin) -> None:
    """The form shown again after a conflict kept the old lease while counting the other admin's as shown:
    saving again put the old lease back, undoing theirs without a word."""
    client.force_login(project_admin)
    ada = _form_as_shown(client, project)
    client.force_login(second_admin)
    bea = _form_as_shown(client, project)
    client.force_login(project_admin)
    _save(client, project, {**ada, "lease_seconds": 300, "overlap": 2})

    client.force_login(second_admin)
    response = _save(client, project, {**bea, "overlap": 4})

    assert response.status_code == 409
    assert "It now shows what they saved of the lease." in response.content.decode()
    form = response.context["form"]
    again = {name: form[name].value() for name in bea}
    assert (int(again["lease_seconds"]), int(again["overlap"])) == (300, 4)
    assert _save(client, project, again).status_code == 200
    project.refresh_from_db()
    assert (project.lease_seconds, project.overlap) == (300, 4)


@pytest.mark.django_db
def test_both_admins_making_the_same_change_is_no_conflict(client, project, project_admin, second_admin) -> None:
    client.force_login(project_admin)
    ada = _form_as_shown(client, project)
    client.force_login(second_admin)
    bea = _form_as_shown(client, project)
    client.force_login(project_admin)
    _save(client, project, {**ada, "overlap": 2})

    client.force_login(second_admin)
    assert _save(client, project, {**bea, "overlap": 2, "name": "Outages (EU)"}).status_code == 200

    project.refresh_from_db()
    assert (project.overlap, project.name) == (2, "Outages (EU)")


@pytest.mark.django_db
def test_saving_settings_leaves_the_predicting_version_alone(client, project, project_admin) -> None:
    """Only the form's settings are written: a version promoted while the form was open stays promoted."""
    client.force_login(project_admin)
    shown = _form_as_shown(client, project)
    promoted = ModelVersion.objects.allocate(project, label="fine-tuned", trained=False)
    Project.objects.filter(pk=project.pk).update(current_version=promoted)

    _save(client, project, {**shown, "guidelines": "New rules."})

    project.refresh_from_db()
    assert (project.current_version, project.guidelines) == (promoted, "New rules.")


@pytest.mark.django_db
@pytest.mark.parametrize("loaded", ["", "not json", "[1, 2]", '{"guidelines": 5}'])
def test_a_form_without_a_readable_record_of_what_it_showed_saves_as_before(client, project, project_admin,
                                                                            loaded) -> None:
    client.force_login(project_admin)
    shown = _form_as_shown(client, project)

    response = _save(client, project, {**shown, "loaded": loaded, "guidelines": "New rules."})

    assert response.status_code == 200
    project.refresh_from_db()
    assert project.guidelines == "New rules."


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL's row locks")
def test_saving_settings_does_not_wait_for_rows_being_written_into_the_project(client, project,
                                                                               project_admin) -> None:
    """Every answer, claim or item being written holds its project's row (its foreign key: KEY SHARE) until it
    commits. Saving the settings locks the row as its UPDATE would (NO KEY UPDATE), which goes ahead beside
    them: FOR UPDATE waited for each, and with twenty reviewers submitting back to back, for as long as they
    kept at it."""
    client.force_login(project_admin)
    shown = _form_as_shown(client, project)
    commit = threading.Event()

    def hold_key_share():
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 FROM {Project._meta.db_table} WHERE id = %s FOR KEY SHARE", [project.pk])

    writer = Other(hold_key_share, hold=commit)
    writer.start()
    assert writer.ready.wait(timeout=30) and writer.error is None
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")
        response = _save(client, project, {**shown, "guidelines": "New rules."})
    finally:
        commit.set()
        writer.join(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")

    assert response.status_code == 200
    project.refresh_from_db()
    assert project.guidelines == "New rules."


# -- Django's admin merges the same way ----------------------------------------------------------------------------

def _admin_form_as_shown(admin_client, project: Project) -> dict:
    """Django admin's change form of the project as the page showed it: its fields and the members' inline."""
    context = admin_client.get(reverse("admin:annotate_project_change", args=[project.pk])).context
    form = context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    for inline in context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        data.update({management.add_prefix(name): management[name].value() for name in management.fields})
        for each in formset.forms:
            data.update({each.add_prefix(name): each[name].value() for name in each.fields})
    shown = {}
    for name, value in data.items():
        if isinstance(value, datetime):  # the admin's split date and time widget
            value = timezone.localtime(value)
            shown.update({f"{name}_0": value.date().isoformat(), f"{name}_1": value.time().isoformat()})
        elif value is not None:
            shown[name] = value
    return shown


def _admin_save(admin_client, project: Project, data: dict):
    return admin_client.post(reverse("admin:annotate_project_change", args=[project.pk]), data, follow=True)


@pytest.mark.django_db
def test_the_django_admin_keeps_what_an_admin_saved_on_the_site_meanwhile(client, admin_client, project,
                                                                          project_admin) -> None:
    """Django's admin wrote every field as its page showed them: a save there put back older guidelines or
    overlap that an admin had changed on the site since."""
    shown = _admin_form_as_shown(admin_client, project)
    client.force_login(project_admin)
    _save(client, project, {**_form_as_shown(client, project), "overlap": 2})

    page = _admin_save(admin_client, project, {**shown, "guidelines": "Pick the root cause."}).content.decode()

    project.refresh_from_db()
    assert (project.guidelines, project.overlap) == ("Pick the root cause.", 2)
    assert "Kept what another admin saved meanwhile: the overlap." in page


@pytest.mark.django_db
def test_the_django_admin_refuses_a_setting_changed_differently_meanwhile(client, admin_client, project,
                                                                          project_admin) -> None:
    shown = _admin_form_as_shown(admin_client, project)
    client.force_login(project_admin)
    _save(client, project, {**_form_as_shown(client, project), "guidelines": "Ada's rules."})

    response = _admin_save(admin_client, project, {**shown, "guidelines": "Root's rules.", "lease_seconds": 300})

    page = response.content.decode()
    assert "Nothing was saved: another admin saved these settings since you opened the page." in page
    assert "it now holds “Ada&#x27;s rules.”" in page and "Root&#x27;s rules.</textarea>" in page
    project.refresh_from_db()
    assert (project.guidelines, project.lease_seconds) == ("Ada's rules.", 600)

    again = {**shown, **{name: value for name, value in _fields(response).items() if name in shown}}
    _admin_save(admin_client, project, again)  # saved again, as the error says, it stores the admin's own
    project.refresh_from_db()
    assert (project.guidelines, project.lease_seconds) == ("Root's rules.", 300)


def _fields(response) -> dict:
    form = response.context["adminform"].form
    return {name: form[name].value() for name in form.fields}


@pytest.mark.django_db
def test_the_django_admin_leaves_the_model_version_to_the_settings_page(admin_client, project) -> None:
    """A version promoted while Django's change page was open stays promoted; switching one there skipped the
    retry of the items an earlier version refused, so it is switched on the site only."""
    shown = _admin_form_as_shown(admin_client, project)
    page = admin_client.get(reverse("admin:annotate_project_change", args=[project.pk])).content.decode()
    assert 'name="current_version"' not in page
    assert 'name="memberships-0-created_at' not in page  # when a member joined is history too
    assert f'href="{reverse("project_settings", args=[project.slug])}#version-title"' in page
    promoted = ModelVersion.objects.allocate(project, label="fine-tuned", trained=False)
    Project.objects.filter(pk=project.pk).update(current_version=promoted)

    _admin_save(admin_client, project, {**shown, "current_version": project.current_version_id, "name": "Renamed"})

    project.refresh_from_db()
    assert (project.current_version, project.name) == (promoted, "Renamed")


@pytest.mark.django_db
def test_the_django_admin_stores_guidelines_with_the_line_ends_the_site_uses(client, admin_client, project,
                                                                             project_admin) -> None:
    """Browsers send a textarea's lines with CR LF: untouched guidelines are no change, so they conflict with
    nothing another admin saved."""
    Project.objects.filter(pk=project.pk).update(guidelines="Line one.\nLine two.")
    shown = _admin_form_as_shown(admin_client, project)
    client.force_login(project_admin)
    _save(client, project, {**_form_as_shown(client, project), "overlap": 2})

    _admin_save(admin_client, project, {**shown, "guidelines": "Line one.\r\nLine two.", "lease_seconds": 300})

    project.refresh_from_db()
    assert (project.guidelines, project.overlap, project.lease_seconds) == ("Line one.\nLine two.", 2, 300)


@pytest.mark.django_db
def test_the_django_admin_adds_a_project_with_a_model_of_its_own(admin_client) -> None:
    """The merge concerns a project that exists: a new one is added with every field the page sends. It got no
    model version (items waited for a prediction for ever), or one chosen by id: another project's."""
    assert 'name="current_version"' not in admin_client.get(reverse("admin:annotate_project_add")).content.decode()
    response = admin_client.post(reverse("admin:annotate_project_add"), {
        "name": "Tickets", "slug": "tickets", "tool": "decision", "mode": "rank", "guidelines": "Line one.\r\nTwo.",
        "configuration": '{"dim": 8}', "overlap": 2, "lease_seconds": 300, "created_at_0": "2026-12-05",
        "created_at_1": "12:00:00", "memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0,
    }, follow=True)

    assert response.status_code == 200
    project = Project.objects.get(slug="tickets")
    assert (project.tool, project.overlap, project.configuration, project.guidelines) == (
        "decision", 2, {"dim": 8}, "Line one.\nTwo.")
    # As from the site's New project: its own fresh model predicts its items, and it says who made it.
    assert (project.current_version.project, project.current_version.trained) == (project, False)
    assert project.created_by.get_username() == "admin"


@pytest.mark.django_db
def test_the_django_admin_form_of_a_project_deleted_meanwhile_saves_nothing(rf, project, admin_user) -> None:
    from annotate import deletion
    from tests.annotate.conftest import project_admin_form

    request = rf.post("/")
    request.user = admin_user
    form = project_admin_form(request, project, name="Renamed")
    deletion.delete_project(Project.objects.get(pk=project.pk))

    assert not form.is_valid()
    assert form.non_field_errors() == ["This project was deleted meanwhile: nothing was saved."]
    assert not Project.objects.exists()


@pytest.mark.django_db
def test_the_django_admin_sends_a_big_team_to_the_members_list(admin_client, project, django_user_model,
                                                                monkeypatch) -> None:
    """Inline, a team of 327 made a change page of 24,000 px that took 3.6 s to load and as long to save: past
    `MembershipInline.most` members the page links to the members' list, which pages and searches them."""
    monkeypatch.setattr(MembershipInline, "most", 3)
    members = project.memberships.count()
    url = reverse("admin:annotate_project_change", args=[project.pk])
    listed = f'{reverse("admin:annotate_membership_changelist")}?project__id__exact={project.pk}'
    page = admin_client.get(url).content.decode()
    assert 'name="memberships-TOTAL_FORMS"' in page
    assert f"{members} (listed below; also" in page

    for n in range(4 - members):
        user = django_user_model.objects.create_user(f"member{n}", password="a-long-password")
        Membership.objects.create(project=project, user=user, role=Role.REVIEWER)
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(url).content.decode()

    assert 'name="memberships-TOTAL_FORMS"' not in page
    counted = [q["sql"] for q in queries if "COUNT(" in q["sql"] and '"annotate_membership"' in q["sql"]]
    assert len(counted) == 1, counted  # the inlines and the Members line share one count
    assert f'4: too many to list here; manage them <a href="{listed.replace("&", "&amp;")}">' in page
    assert _admin_save(admin_client, project, {**_admin_form_as_shown(admin_client, project),
                                               "name": "Renamed"}).status_code == 200
    project.refresh_from_db()
    assert (project.name, project.memberships.count()) == ("Renamed", 4)  # the members are as they were
    members_list = admin_client.get(listed)
    assert members_list.status_code == 200
    assert set(members_list.context["cl"].result_list) == set(project.memberships.all())
    # Its "Add membership" keeps the list's filter, and the form starts with that project.
    add = admin_client.get(reverse("admin:annotate_membership_add"),
                           {"_changelist_filters": f"project__id__exact={project.pk}"})
    assert add.context["adminform"].form["project"].value() == str(project.pk)
