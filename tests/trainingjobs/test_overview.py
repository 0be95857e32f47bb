"""The overview of training jobs (`/jobs/`): whose jobs it lists, in which order, its tabs, its polling, and the
links that lead to it. Lists of jobs leave the record ids each job froze unread."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from annotate.models import Membership, ModelVersion, Project, Role
from tests.trainingjobs.conftest import CONFIGURATION, review
from trainingjobs import runner, services
from trainingjobs.models import FROZEN_FIELDS, JobState, TrainingJob

HTMX = {"HTTP_HX_REQUEST": "true"}
INDEX = reverse("trainingjobs:index")


def launch(project: Project, **fields) -> TrainingJob:
    job = services.launch(project, base_version=project.current_version, epochs=1, minibatch_size=4)
    if fields:
        TrainingJob.objects.filter(pk=job.pk).update(**fields)
        job.refresh_from_db()
    return job


@pytest.fixture
def other(db, django_user_model) -> Project:
    """A second project, with reviewed items of its own, that `ada` does not administer."""
    project = Project.objects.create(slug="billing", name="Billing", tool="decision", mode="rank",
                                     configuration=CONFIGURATION)
    owner = django_user_model.objects.create_user("otto")
    Membership.objects.create(project=project, user=owner, role=Role.ADMIN)
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save(update_fields=["current_version"])
    review(project, owner, 4, start=500)
    return project


def rows(page: str) -> list[str]:
    """The jobs' rows as "<id> <state>", in the page's order."""
    return [f"{pk} {state}" for pk, state in re.findall(r'<tr id="job-row-(\d+)" data-state="(\w+)">', page)]


def test_an_admin_sees_the_jobs_of_the_projects_they_administer_queued_and_running_first(
        client, admin, project, reviewed, other) -> None:
    now = timezone.now()
    done = launch(project, state=JobState.SUCCEEDED, step=12, total_steps=12, created_at=now - timedelta(hours=3))
    failed = launch(project, state=JobState.FAILED, step=4, total_steps=12, created_at=now - timedelta(hours=1),
                    error="CUDA out of memory")
    # Queued in this order; the second was launched first and queued again later (a resume, say).
    second = launch(project, created_at=now - timedelta(hours=2), queued_at=now - timedelta(minutes=5))
    first = launch(project, created_at=now - timedelta(minutes=10), queued_at=now - timedelta(minutes=10))
    running = launch(project, state=JobState.RUNNING, step=3, total_steps=12, created_at=now - timedelta(minutes=1))
    elsewhere = launch(other)
    client.force_login(admin)

    response = client.get(INDEX)

    page = response.content.decode()
    assert response.status_code == 200
    # The running job, the queued ones as workers take them (the longest queued first), then the rest newest first.
    assert rows(page) == [f"{running.pk} RUNNING", f"{first.pk} PENDING", f"{second.pk} PENDING",
                          f"{failed.pk} FAILED", f"{done.pk} SUCCEEDED"]
    assert f"job-row-{elsewhere.pk}" not in page  # a project they do not administer
    assert "1 running, 2 queued." in page
    assert "All (5)" in page and "Queued and running (3)" in page and "Failed (1)" in page
    assert "CUDA out of memory" in page  # a failed job says why in its row
    assert page.count("not started") == 2  # the queued ones: their steps are counted when a worker starts
    assert f'href="{reverse("trainingjobs:project_jobs", args=[project.slug])}">Outages</a>' in page
    assert f'aria-label="Job {running.pk}: step 3 of 12"' in page


def test_staff_see_every_projects_jobs(client, admin, project, reviewed, other) -> None:
    mine, theirs = launch(project), launch(other)
    admin.is_staff = True
    admin.save(update_fields=["is_staff"])
    client.force_login(admin)

    page = client.get(INDEX).content.decode()

    assert sorted(rows(page)) == sorted([f"{mine.pk} PENDING", f"{theirs.pk} PENDING"])
    assert f'<a href="{INDEX}">Training</a>' in page  # the site's navigation leads staff here


def test_reviewers_and_outsiders_get_403_and_the_signed_out_the_sign_in_page(
        client, reviewer, project, django_user_model) -> None:
    client.force_login(reviewer)
    response = client.get(INDEX)
    assert response.status_code == 403
    assert "Only a project's admins see its training jobs." in html.unescape(response.content.decode())
    client.force_login(django_user_model.objects.create_user("olga"))
    assert client.get(INDEX).status_code == 403
    client.logout()
    assert client.get(INDEX)["Location"].startswith(reverse("login"))


def test_the_tabs_show_queued_and_running_or_failed_jobs_and_an_unknown_tab_shows_all(
        client, admin, project, reviewed) -> None:
    pending = launch(project)
    failed = launch(project, state=JobState.FAILED)
    done = launch(project, state=JobState.SUCCEEDED)
    client.force_login(admin)

    assert rows(client.get(INDEX, {"show": "active"}).content.decode()) == [f"{pending.pk} PENDING"]
    assert rows(client.get(INDEX, {"show": "failed"}).content.decode()) == [f"{failed.pk} FAILED"]
    everything = client.get(INDEX, {"show": "nonsense", "page": "999"}).content.decode()
    assert rows(everything) == [f"{pending.pk} PENDING", f"{done.pk} SUCCEEDED", f"{failed.pk} FAILED"]
    TrainingJob.objects.filter(pk=pending.pk).update(state=JobState.CANCELLED)
    assert "No job is queued or running." in client.get(INDEX, {"show": "active"}).content.decode()


def test_the_empty_list_says_where_jobs_are_launched(client, admin, project) -> None:
    client.force_login(admin)

    page = client.get(INDEX).content.decode()

    assert 'id="no-jobs"' in page and "No job is queued or running." in page
    assert f'<a href="{reverse("trainingjobs:project_jobs", args=[project.slug])}">Outages</a>.' in page

    for n in range(5):
        more = Project.objects.create(slug=f"p{n}", name=f"P{n}", tool="decision", mode="rank")
        Membership.objects.create(project=more, user=admin, role=Role.ADMIN)
    page = client.get(INDEX).content.decode()
    assert page.count('href="/jobs/projects/') == 5 and ">P4<" not in page and "P3</a> and others." in page


def test_the_list_polls_while_a_job_is_queued_or_running_and_stops_with_286(client, admin, project, reviewed) -> None:
    job = launch(project)
    client.force_login(admin)

    polled = client.get(INDEX, {"show": "active"}, **HTMX)

    assert polled.status_code == 200
    assert 'hx-trigger="every 5s"' in polled.content.decode() and "<html" not in polled.content.decode()
    assert 'hx-get="/jobs/?show=active"' in polled.content.decode()  # it polls the tab it shows
    runner.train(job.pk, "worker-a")
    final = client.get(INDEX, **HTMX)
    assert final.status_code == 286 and f"{job.pk} SUCCEEDED" in rows(final.content.decode())
    assert 'hx-trigger="every 5s"' not in final.content.decode()


def test_queued_jobs_that_no_worker_takes_get_a_warning(client, admin, project, reviewed) -> None:
    launch(project, queued_at=timezone.now() - timedelta(minutes=3))
    client.force_login(admin)
    assert "is a GPU worker up?" in client.get(INDEX).content.decode()

    launch(project, state=JobState.RUNNING)
    assert "is a GPU worker up?" not in client.get(INDEX).content.decode()


def test_lists_of_jobs_and_the_polled_status_leave_the_frozen_record_ids_unread(
        client, admin, project, reviewed) -> None:
    job = launch(project)
    assert job.train_records  # the launch froze the reviewed answers
    client.force_login(admin)

    listed = client.get(INDEX).context["page"].object_list[0]
    on_project_page = client.get(reverse("trainingjobs:project_jobs", args=[project.slug])).context["jobs"][0]
    polled = client.get(reverse("trainingjobs:job", args=[job.pk]), **HTMX).context["job"]
    full_page = client.get(reverse("trainingjobs:job", args=[job.pk]))

    for row in (listed, on_project_page, polled):
        assert set(FROZEN_FIELDS) <= row.get_deferred_fields()
    assert "log" in listed.get_deferred_fields() and "log" in on_project_page.get_deferred_fields()
    assert f"{len(job.train_records)} training and" in full_page.content.decode()  # the job page counts them


def test_the_home_page_leads_project_admins_to_their_jobs(client, admin, reviewer, project) -> None:
    link = f'href="{INDEX}" role="button" class="outline secondary" id="training-jobs-link"'
    client.force_login(admin)
    assert link in client.get(reverse("home")).content.decode()
    client.force_login(reviewer)
    page = client.get(reverse("home")).content.decode()
    assert link not in page and f'href="{INDEX}"' not in page


def test_the_header_leads_project_admins_who_are_not_staff_to_training(
        client, admin, reviewer, project) -> None:
    """The header's "Training" and "New project" show for a project's admin from their first visit home, without
    a query on every page to learn it; a reviewer never sees them, and an admin no longer one loses them there."""
    detail = reverse("project_detail", args=[project.slug])
    header = f'<li><a href="{INDEX}">Training</a></li>'
    create = f'<li><a href="{reverse("project_create")}">New project</a></li>'
    assert not admin.is_staff

    client.force_login(admin)
    client.get(reverse("home"))
    page = client.get(detail).content.decode()
    assert header in page and create in page

    client.force_login(reviewer)
    client.get(reverse("home"))
    page = client.get(detail).content.decode()
    assert header not in page and create not in page

    client.force_login(admin)
    client.get(reverse("home"))
    Membership.objects.filter(project=project, user=admin).update(role=Role.REVIEWER)
    assert header in client.get(detail).content.decode()  # noted at the last visit home
    client.get(reverse("home"))
    assert header not in client.get(detail).content.decode()


def test_a_user_who_may_make_projects_finds_new_project_and_training_once_they_made_one(
        client, django_user_model) -> None:
    maker = django_user_model.objects.create_user("mia", password="a-long-password")
    maker.user_permissions.add(Permission.objects.get(codename="add_project"))
    client.force_login(maker)
    home = client.get(reverse("home")).content.decode()  # may create projects, administers none yet
    assert f'<li><a href="{reverse("project_create")}">New project</a></li>' in home
    assert f'href="{INDEX}"' not in home
    response = client.post(reverse("project_create"), {
        "name": "Claims", "slug": "claims", "kind": "investigator/verification",
        "configuration": '{"dim": 8}', "overlap": 1, "lease_seconds": 600,
    }, follow=True)
    assert Project.objects.filter(slug="claims").exists(), response.content
    assert f'<li><a href="{INDEX}">Training</a></li>' in response.content.decode()


def test_the_overviews_pages_keep_its_tab(client, admin, project) -> None:
    start = timezone.now() - timedelta(days=3)
    TrainingJob.objects.bulk_create(TrainingJob(project=project, base_version=project.current_version,
                                                state=JobState.FAILED, created_at=start + timedelta(minutes=n))
                                    for n in range(51))
    client.force_login(admin)

    first = client.get(INDEX, {"show": "failed"}).content.decode()
    assert 'href="?show=failed&amp;page=2"' in first and "Page 1 of 2" in first
    second = client.get(INDEX, {"show": "failed", "page": 2}).content.decode()
    assert 'href="?show=failed&amp;page=1"' in second and "Page 2 of 2" in second
