"""A project with many members in a real browser: the add form comes first, the list scrolls in its own box and
`/` finds a member, so removing one and reaching what follows the list never means scrolling past them all; a
new reviewer's account and password; a forgotten password reset by email."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from annotate.models import Membership, Project, Role
from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_finds_and_removes_one_of_many_members(page, artifacts, django_user_model) -> None:
    ada = django_user_model.objects.create_user("ada", password=PASSWORD)
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64})
    Membership.objects.create(project=project, user=ada, role=Role.ADMIN)
    users = django_user_model.objects.bulk_create(
        [django_user_model(username=f"reviewer{n:03d}") for n in range(120)])
    Membership.objects.bulk_create([Membership(project=project, user=u, role=Role.REVIEWER) for u in users])

    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/outages/settings/")
    assert page.locator("#members-title").inner_text() == "Members 121"
    box = page.locator(".scroll-box").bounding_box()
    assert box["height"] < 500  # 121 rows scroll inside the box
    page.locator("#delete-section").scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "0-many-members.png", full_page=True)

    page.locator("body").press("/")
    assert page.evaluate("document.activeElement.id") == "member-filter"
    page.keyboard.type("reviewer07")
    rows = page.locator("#members-table tbody tr:visible")
    assert rows.count() == 10  # reviewer070 to reviewer079
    page.keyboard.type("3")
    assert rows.count() == 1
    page.screenshot(path=artifacts / "1-found.png")
    page.get_by_role("button", name="Remove reviewer073").click()
    page.wait_for_load_state()
    assert "reviewer073" in page.get_by_role("status").first.inner_text()
    assert not Membership.objects.filter(project=project, user__username="reviewer073").exists()
    assert Membership.objects.filter(project=project).count() == 120

    page.locator("#member-filter").fill("nobody")
    page.locator("#member-filter").dispatch_event("input")
    assert page.locator("#member-filter-none").is_visible()
    assert page.locator("#members-table tbody tr:visible").count() == 0

    # Every row's buttons post one shared form, each to its own address: a new link for the member found, by an
    # admin who may set others' passwords.
    ada.user_permissions.add(Permission.objects.get(codename="change_user"))
    page.reload()
    page.locator("#member-filter").fill("reviewer074")
    page.locator("#member-filter").dispatch_event("input")
    page.get_by_role("button", name="Set-password link for reviewer074").click()
    assert "/accounts/reset/" in page.get_by_label("Set-password link for reviewer074").input_value()


def test_a_site_admin_creates_a_reviewers_account_and_the_reviewer_sets_a_password(
        page, browser, artifacts, django_user_model) -> None:
    django_user_model.objects.create_superuser("ada", password=PASSWORD)
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64})
    Membership.objects.create(project=project, user=django_user_model.objects.get(username="ada"), role=Role.ADMIN)

    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/outages/settings/")
    page.get_by_label("Usernames").fill("carol")
    page.get_by_label("Create accounts for names that have none").check()
    page.get_by_role("button", name="Add or update members").click()
    page.wait_for_url("**/members/")
    assert page.get_by_role("heading", level=1).inner_text() == "New account"
    page.screenshot(path=artifacts / "2-account-created.png", full_page=True)
    page.get_by_role("button", name="Copy the link for carol").click()
    page.get_by_role("button", name="Copied the link for carol").wait_for()
    link = page.evaluate("navigator.clipboard.readText()")
    assert link == page.get_by_label("Set-password link for carol").input_value()
    assert "/accounts/reset/" in link

    newcomer = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        theirs = newcomer.new_page()
        theirs.goto(link)
        theirs.get_by_role("heading", name="Set your password").wait_for()
        assert "For carol." in theirs.locator("hgroup").inner_text()
        theirs.locator("#id_new_password1").fill("carols-own-passphrase")
        theirs.locator("#id_new_password2").fill("carols-own-passphrase")
        theirs.screenshot(path=artifacts / "3-set-password.png", full_page=True)
        theirs.get_by_role("button", name="Set password").click()
        theirs.get_by_role("heading", name="Password set").wait_for()
        theirs.get_by_role("button", name="Sign in").click()
        theirs.get_by_label("Username").fill("carol")
        theirs.get_by_label("Password").fill("carols-own-passphrase")
        theirs.get_by_role("button", name="Sign in").click()
        theirs.wait_for_url(f"{page.base_url}/")
        assert "Outages" in theirs.locator("main").inner_text()

        page.goto(f"{page.base_url}/projects/outages/settings/")
        carol_row = page.locator("#members-table tr", has_text="carol")
        assert "never" not in carol_row.inner_text()  # she has signed in
        page.screenshot(path=artifacts / "4-members-signed-in.png", full_page=True)

        # Carol leaves the team: her account is deactivated, and her open browser is signed out at once.
        page.get_by_role("button", name="Deactivate carol's account").click()
        page.get_by_text("carol's account is deactivated: they can no longer sign in").wait_for()
        assert "deactivated" in carol_row.locator("td").first.inner_text()
        page.screenshot(path=artifacts / "5-deactivated.png", full_page=True)
        theirs.reload()
        theirs.wait_for_url("**/accounts/login/**")
        theirs.get_by_label("Username").fill("carol")
        theirs.get_by_label("Password").fill("carols-own-passphrase")
        theirs.get_by_role("button", name="Sign in").click()
        theirs.locator(".errorlist, [role=alert]").first.wait_for()
        assert theirs.url.startswith(f"{page.base_url}/accounts/login/")

        page.get_by_role("button", name="Reactivate carol's account").click()
        page.get_by_text("carol's account is active again").wait_for()
        theirs.get_by_label("Password").fill("carols-own-passphrase")
        theirs.get_by_role("button", name="Sign in").click()
        theirs.wait_for_url(f"{page.base_url}/")
    finally:
        newcomer.close()


def test_a_reviewer_who_forgot_their_password_gets_a_link_by_email(page, artifacts, settings,
                                                                    django_user_model) -> None:
    import re

    from django.core import mail

    settings.TC_EMAIL = True  # messages stay in mail.outbox: the live server runs in this process
    django_user_model.objects.create_user("rita", email="rita@example.com", password="forgotten-long-ago")

    page.goto(f"{page.base_url}/accounts/login/")
    page.get_by_role("link", name="Forgot your password?").click()
    page.get_by_label("Username or email address").fill("rita@example.com")
    page.screenshot(path=artifacts / "0-forgotten.png", full_page=True)
    page.get_by_role("button", name="Email me a link").click()
    page.locator("#forgotten-sent").wait_for()
    page.screenshot(path=artifacts / "1-on-its-way.png", full_page=True)

    [message] = mail.outbox
    assert message.to == ["rita@example.com"]
    [link] = re.findall(r"http://\S+/accounts/reset/\S+", message.body)
    page.goto(link)
    page.get_by_role("heading", name="Set your password").wait_for()
    page.locator("#id_new_password1").fill("ritas-new-passphrase")
    page.locator("#id_new_password2").fill("ritas-new-passphrase")
    page.get_by_role("button", name="Set password").click()
    page.get_by_role("heading", name="Password set").wait_for()
    sign_in(page, "rita", "ritas-new-passphrase")
    assert page.url == f"{page.base_url}/"
