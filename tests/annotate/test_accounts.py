"""Accounts for a team: an admin creates reviewers' accounts and gives set-password links; everyone changes their
own password; a forgotten password says whom to ask (the site sends no email by default: with `TC_EMAIL_URL` it
mails links, tests/annotate/test_account_email.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.core import mail
from django.test import Client
from django.urls import reverse

from annotate.models import Membership, Role
from tests.annotate.conftest import NEW_PASSWORD as PASSWORD
from tests.annotate.conftest import links_in, set_password


@pytest.mark.django_db
def test_a_site_admin_creates_accounts_and_each_new_reviewer_sets_their_password(client, project, site_admin,
                                                                                  django_user_model) -> None:
    client.force_login(site_admin)
    page = client.get(reverse("project_settings", args=[project.slug])).content.decode()
    assert "Create accounts for names that have none" in page

    created = client.post(reverse("member_add", args=[project.slug]),
                          {"username": "carol, dan\nrita", "role": "reviewer", "create": "on"})
    assert created.status_code == 200
    assert "no-store" in created["Cache-Control"]  # each link sets a password: never kept by a cache
    body = created.content.decode()
    assert "New accounts" in body and "3 users are now reviewers of Outages: rita, carol, dan." in body
    links = links_in(body)
    assert len(links) == 2  # rita had an account: no link for her
    assert f"carol\t{links[0]}\ndan\t{links[1]}\n</textarea>" in body  # all of them, to copy at once
    assert ">carol</td>" in body and ">dan</td>" in body and ">rita</td>" not in body
    carol = django_user_model.objects.get(username="carol")
    assert not carol.has_usable_password()
    assert project.memberships.get(user=carol).role == Role.REVIEWER

    visitor = Client()
    done = set_password(visitor, links[0])
    assert "Password set" in done.content.decode()
    assert visitor.login(username="carol", password=PASSWORD)
    assert "Outages" in visitor.get(reverse("home")).content.decode()
    # Used once, the link no longer works.
    again = Client().get(links[0].removeprefix("http://testserver"), follow=True).content.decode()
    assert "This link no longer works" in again


@pytest.mark.django_db
def test_without_the_right_to_create_users_an_unknown_name_still_adds_nobody(client, project, project_admin,
                                                                             django_user_model) -> None:
    client.force_login(project_admin)
    page = client.get(reverse("project_settings", args=[project.slug])).content.decode()
    assert "Create accounts" not in page
    assert "Set-password link" not in page  # nor may they set others' passwords

    refused = client.post(reverse("member_add", args=[project.slug]),
                          {"username": "rita carol", "role": "reviewer", "create": "on"})
    assert refused.status_code == 400
    assert ("No user named &#x27;carol&#x27;; nobody was added. Ask a site administrator to create their accounts."
            in refused.content.decode())
    assert not django_user_model.objects.filter(username="carol").exists()


@pytest.mark.django_db
def test_unknown_names_need_the_box_ticked_and_impossible_names_create_nobody(client, project, site_admin,
                                                                              django_user_model) -> None:
    client.force_login(site_admin)
    url = reverse("member_add", args=[project.slug])
    unticked = client.post(url, {"username": "carol", "role": "reviewer"})
    assert unticked.status_code == 400
    assert "Tick “Create accounts” to create them." in unticked.content.decode()

    impossible = client.post(url, {"username": "carol d/e " + "x" * 151, "role": "reviewer", "create": "on"})
    assert impossible.status_code == 400
    assert "Not a possible username: &#x27;d/e&#x27;, &#x27;xxx" in impossible.content.decode()
    assert not django_user_model.objects.filter(username="carol").exists()

    gone = django_user_model.objects.create_user("gone", is_active=False)
    deactivated = client.post(url, {"username": "gone carol", "role": "reviewer", "create": "on"})
    assert "&#x27;gone&#x27;: deactivated; nobody was added." in deactivated.content.decode()
    assert not project.memberships.filter(user=gone).exists()
    assert not django_user_model.objects.filter(username="carol").exists()


@pytest.mark.django_db
def test_a_name_that_differs_from_an_account_only_in_case_is_not_a_new_account(client, project, site_admin,
                                                                                reviewer, django_user_model) -> None:
    """`Rita` with Create accounts ticked made a second account beside `rita`: one person, two sign-ins."""
    client.force_login(site_admin)
    url = reverse("member_add", args=[project.slug])

    for data in ({"username": "Rita carol", "role": "reviewer", "create": "on"},
                 {"username": "RITA", "role": "reviewer"}):
        refused = client.post(url, data)
        assert refused.status_code == 400
        name = data["username"].split()[0]
        assert (f"No user named &#x27;{name}&#x27; (did you mean &#x27;rita&#x27;?); nobody was added."
                in refused.content.decode())
    assert not django_user_model.objects.filter(username__in=["Rita", "RITA", "carol"]).exists()


@pytest.mark.django_db
def test_a_member_who_lost_their_link_gets_a_new_one_and_their_password_works_until_then(
        client, project, site_admin, reviewer) -> None:
    client.force_login(site_admin)
    page = client.get(reverse("project_settings", args=[project.slug])).content.decode()
    assert 'aria-label="Set-password link for rita"' in page
    assert 'aria-label="Set-password link for ada"' not in page  # their own: the account page
    assert "never" in page  # nobody here has signed in yet

    membership = project.memberships.get(user=reviewer)
    issued = client.post(reverse("member_link", args=[project.slug, membership.pk]))
    assert issued.status_code == 200 and "no-store" in issued["Cache-Control"]
    assert "Their current password keeps working until they set a new one." in " ".join(
        issued.content.decode().split())
    [link] = links_in(issued.content.decode())
    reviewer.refresh_from_db()
    assert reviewer.check_password("a-long-password")  # still theirs (signing in now would spend the link)

    set_password(Client(), link, "another-long-passphrase")
    assert not Client().login(username="rita", password="a-long-password")
    assert Client().login(username="rita", password="another-long-passphrase")


@pytest.mark.django_db
def test_who_may_give_a_set_password_link(client, project, site_admin, project_admin, reviewer, outsider,
                                          django_user_model) -> None:
    membership = project.memberships.get(user=reviewer)
    url = reverse("member_link", args=[project.slug, membership.pk])

    client.force_login(reviewer)
    assert client.post(url).status_code == 403  # not an admin of the project
    client.force_login(outsider)
    assert client.post(url).status_code == 404  # not a member at all
    plain_admin = django_user_model.objects.create_user("pat")
    Membership.objects.create(project=project, user=plain_admin, role=Role.ADMIN)
    client.force_login(plain_admin)
    assert client.post(url).status_code == 403  # a project admin without the site's right to change users
    client.force_login(site_admin)
    assert client.get(url).status_code == 405
    own = project.memberships.get(user=site_admin)
    assert client.post(reverse("member_link", args=[project.slug, own.pk])).status_code == 403

    boss = django_user_model.objects.create_superuser("boss", password="a-long-password")
    boss_membership = Membership.objects.create(project=project, user=boss, role=Role.ADMIN)
    refused = client.post(reverse("member_link", args=[project.slug, boss_membership.pk]))
    assert refused.status_code == 403
    assert "Only a superuser gives boss a set-password link." in refused.content.decode()
    client.force_login(boss)
    assert client.post(reverse("member_link", args=[project.slug, membership.pk])).status_code == 200


@pytest.mark.django_db
def test_everyone_changes_their_own_password_on_the_account_page(client, reviewer) -> None:
    client.force_login(reviewer)
    home = client.get(reverse("home")).content.decode()
    assert f'href="{reverse("password_change")}"' in home

    page = client.get(reverse("password_change")).content.decode()
    assert "Your account" in page and "Signed in as <strong>rita</strong>" in page and "site-header" in page
    wrong = client.post(reverse("password_change"), {"old_password": "not-it", "new_password1": PASSWORD,
                                                     "new_password2": PASSWORD})
    assert wrong.status_code == 200 and "Your old password was entered incorrectly" in wrong.content.decode()

    done = client.post(reverse("password_change"), {"old_password": "a-long-password", "new_password1": PASSWORD,
                                                    "new_password2": PASSWORD}, follow=True)
    assert "Password changed" in done.content.decode()
    assert client.get(reverse("home")).status_code == 200  # still signed in here
    assert Client().login(username="rita", password=PASSWORD)

    client.logout()
    assert client.get(reverse("password_change"))["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_a_forgotten_password_says_whom_to_ask_and_sends_nothing(client, reviewer) -> None:
    login = client.get(reverse("login")).content.decode()
    assert f'href="{reverse("password_reset")}"' in login and "Forgot your password?" in login
    page = client.get(reverse("password_reset"))
    assert page.status_code == 200 and "This site sends no email" in page.content.decode()
    assert client.post(reverse("password_reset"), {"email": "rita@example.com"}).status_code == 405
    assert mail.outbox == []


@pytest.mark.django_db
def test_a_forged_or_mangled_link_sets_nothing(client, reviewer) -> None:
    page = client.get(reverse("password_reset_confirm", kwargs={"uidb64": "MQ", "token": "set-password"}),
                      follow=True)
    assert page.status_code == 200 and "This link no longer works" in page.content.decode()
    nobody = client.get(reverse("password_reset_confirm", kwargs={"uidb64": "OTk5OTk", "token": "abc-def"}),
                        follow=True)  # user 99999
    assert "This link no longer works" in nobody.content.decode()


@pytest.mark.django_db
def test_signing_in_spends_a_link_given_earlier(client, project, site_admin, reviewer) -> None:
    client.force_login(site_admin)
    issued = client.post(reverse("member_link", args=[project.slug, project.memberships.get(user=reviewer).pk]))
    [link] = links_in(issued.content.decode())
    assert Client().login(username="rita", password="a-long-password")
    page = Client().get(link.removeprefix("http://testserver"), follow=True).content.decode()
    assert "This link no longer works" in page


@pytest.mark.django_db
def test_an_account_created_meanwhile_by_another_admin_adds_nobody_and_says_so(client, project, site_admin,
                                                                               django_user_model,
                                                                               monkeypatch) -> None:
    from annotate import accounts

    def created_elsewhere_first(names):
        django_user_model.objects.create_user(names[0])  # the other admin's request, a moment earlier
        return [django_user_model.objects.create_user(name) for name in names]

    monkeypatch.setattr(accounts, "create", created_elsewhere_first)
    client.force_login(site_admin)
    page = client.post(reverse("member_add", args=[project.slug]),
                       {"username": "carol", "role": "reviewer", "create": "on"})
    assert page.status_code == 409
    assert "created meanwhile by someone else; nobody was added" in page.content.decode()
    assert not project.memberships.filter(user__username="carol").exists()


@pytest.mark.django_db
def test_a_session_signed_in_before_the_sites_own_backend_stays_signed_in(client, reviewer) -> None:
    from django.contrib.auth import BACKEND_SESSION_KEY
    from django.test import override_settings

    earlier = "django.contrib.auth.backends.ModelBackend"
    with override_settings(AUTHENTICATION_BACKENDS=[earlier]):
        client.force_login(reviewer, backend=earlier)  # as the site signed people in before the upgrade
    assert client.session[BACKEND_SESSION_KEY] == earlier

    page = client.get(reverse("home"))
    assert page.status_code == 200 and "Your projects" in page.content.decode()
    assert client.session[BACKEND_SESSION_KEY] == "annotate.backends.ModelBackend"


def sign_in_as(client, password: str, username: str = "rita", address: str = "203.0.113.7", url=None):
    return client.post(url or reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.django_db
def test_ten_failed_sign_ins_lock_that_name_from_that_address_for_a_while(client, reviewer, fresh_cache,
                                                                         monkeypatch) -> None:
    from annotate import accounts

    clock = [1_000_000.0]
    monkeypatch.setattr(accounts, "_now", lambda: clock[0])
    for _ in range(10):
        refused = sign_in_as(client, "a-wrong-guess")
        assert refused.status_code == 200 and "Please enter a correct username and password" in refused.content.decode()

    locked = sign_in_as(client, "a-long-password")  # the right one, too late
    assert "_auth_user_id" not in client.session
    assert ("Too many failed sign-ins as rita from here: try again in 15 minutes, or ask your project&#x27;s admin "
            "for a set-password link.") in locked.content.decode()
    assert sign_in_as(Client(), "a-long-password", address="198.51.100.2").status_code == 302  # elsewhere: fine

    clock[0] += 14 * 60
    assert "try again in 1 minute," in sign_in_as(client, "a-long-password").content.decode()
    clock[0] += 61
    assert sign_in_as(client, "a-long-password").status_code == 302  # the window has passed


@pytest.mark.django_db
def test_a_successful_sign_in_forgets_the_failures_before_it(client, reviewer, fresh_cache) -> None:
    for _ in range(9):
        sign_in_as(client, "a-wrong-guess")
    assert sign_in_as(client, "a-long-password").status_code == 302
    client.logout()
    for _ in range(9):
        sign_in_as(client, "a-wrong-guess")
    assert sign_in_as(client, "a-long-password").status_code == 302  # nine again, not eighteen


@pytest.mark.redis
def test_guesses_sent_at_once_to_several_web_processes_are_all_counted(settings) -> None:
    """Eight guessers at once, each thread with its own Redis connection as each web process has: every failure
    counts towards the lock (reading the count and writing it back, most were lost)."""
    import os
    import threading

    from django.core.cache import cache

    from annotate import accounts
    from tests.conftest import REDIS_URL

    settings.CACHES = {"default": {"BACKEND": "annotate.cache.RedisCache", "LOCATION": REDIS_URL,
                                   "KEY_PREFIX": f"tc-test-signin-{os.getpid()}"}}
    settings.TC_SIGNIN_FAILURES = 80
    start = threading.Barrier(8)
    failed: list[BaseException] = []

    def guess() -> None:
        try:
            start.wait(timeout=30)
            for _ in range(10):
                accounts.signin_failed("rita", "203.0.113.7")
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failed.append(exc)

    guessers = [threading.Thread(target=guess) for _ in range(8)]
    for thread in guessers:
        thread.start()
    for thread in guessers:
        thread.join(timeout=60)
    try:
        assert not failed
        assert accounts.signin_wait("rita", "203.0.113.7") > 0  # all 80 counted
        accounts.signin_failed("rita", "198.51.100.2")
        assert accounts.signin_wait("rita", "198.51.100.2") == 0
    finally:
        accounts.signin_succeeded("rita", "203.0.113.7")
        accounts.signin_succeeded("rita", "198.51.100.2")
    assert accounts.signin_wait("rita", "203.0.113.7") == 0
    assert not [key for key in cache._cache.get_client().keys(f"tc-test-signin-{os.getpid()}:*")]


@pytest.mark.django_db
def test_the_admins_sign_in_page_is_limited_too(client, django_user_model, fresh_cache) -> None:
    django_user_model.objects.create_superuser("boss", password="a-long-password")
    url = reverse("admin:login")
    for _ in range(10):
        assert sign_in_as(client, "wrong", username="boss", url=url).status_code == 200
    page = sign_in_as(client, "a-long-password", username="boss", url=url)
    assert page.status_code == 200 and "Too many failed sign-ins as boss" in page.content.decode()


@pytest.mark.django_db
def test_a_site_admin_deactivates_someone_who_left_and_reactivates_them(client, project, site_admin, reviewer,
                                                                        ready_items) -> None:
    from annotate import queue
    from annotate.models import Answer, ApiToken, Claim, Project

    other = Project.objects.create(slug="billing", name="Billing", tool="decision", mode="rank")
    Membership.objects.create(project=other, user=reviewer, role=Role.REVIEWER)
    answered, held = ready_items(project, [0.1, 0.2])
    (held_elsewhere,) = ready_items(other, [0.3])
    queue.claim_next(project, reviewer)
    queue.submit(answered, reviewer, "db")
    assert queue.claim_next(project, reviewer) == held
    assert queue.claim_next(other, reviewer) == held_elsewhere
    _, key = ApiToken.objects.issue(reviewer, name="laptop")
    their_browser = Client()
    their_browser.force_login(reviewer)
    membership = project.memberships.get(user=reviewer)
    url = reverse("member_active", args=[project.slug, membership.pk])
    client.force_login(site_admin)

    settings_page = client.get(reverse("project_settings", args=[project.slug])).content.decode()
    assert f"aria-label=\"Deactivate {reviewer.username}'s account\"" in settings_page
    page = client.post(url, {"active": "0"}, follow=True).content.decode()

    assert (f"{reviewer.username}&#x27;s account is deactivated: they can no longer sign in, and are signed out "
            "everywhere. The 2 items they were labelling went back to the queue.") in page
    assert ">deactivated</span>" in page and "Reactivate" in page
    reviewer.refresh_from_db()
    assert not reviewer.is_active
    assert not Claim.objects.filter(reviewer=reviewer).exists()
    assert Answer.objects.filter(reviewer=reviewer, item=answered).exists()  # their work stays
    assert Membership.objects.filter(user=reviewer).count() == 2
    assert their_browser.get(reverse("home")).status_code == 302  # signed out at their next request
    assert not Client().login(username=reviewer.username, password="a-long-password")
    assert Client().get(reverse("api:projects"), HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 401

    again = client.post(url, {"active": "0"}, follow=True).content.decode()
    assert "account was already deactivated" in again
    back = client.post(url, {"active": "1"}, follow=True).content.decode()
    assert f"{reviewer.username}&#x27;s account is active again" in back
    assert Client().login(username=reviewer.username, password="a-long-password")
    assert Client().get(reverse("api:projects"), HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200
    # Their old browser stays signed out: its session signed them in again once they were active.
    assert their_browser.get(reverse("home")).status_code == 302


@pytest.mark.django_db
def test_djangos_admin_keeps_the_sites_account_rules(client, site_admin, django_user_model) -> None:
    """Staff who may change users could untick their own Active (locked out at once), and change a superuser's
    account, password and superuser status there, which the site refuses."""
    site_admin.is_staff = True
    site_admin.save(update_fields=["is_staff"])
    site_admin.user_permissions.add(*Permission.objects.filter(codename__in=["view_user"]))
    boss = django_user_model.objects.create_superuser("boss", password="a-long-password")
    client.force_login(site_admin)

    own = client.get(reverse("admin:auth_user_change", args=[site_admin.pk])).content.decode()
    assert 'name="is_active"' not in own and 'name="is_superuser"' not in own
    assert 'name="username"' in own  # the rest of their own account is theirs to change
    assert 'name="is_active"' not in client.get(reverse("admin:auth_user_change", args=[boss.pk])).content.decode()
    assert client.post(reverse("admin:auth_user_change", args=[boss.pk]), {"username": "boss2"}).status_code == 403
    assert client.get(reverse("admin:auth_user_password_change", args=[boss.pk])).status_code == 403
    boss.refresh_from_db()
    assert boss.username == "boss" and boss.is_active


@pytest.mark.django_db
def test_who_may_deactivate_an_account(client, project, site_admin, reviewer, outsider, django_user_model) -> None:
    membership = project.memberships.get(user=reviewer)
    url = reverse("member_active", args=[project.slug, membership.pk])

    client.force_login(reviewer)
    assert client.post(url, {"active": "0"}).status_code == 403  # not an admin of the project
    client.force_login(outsider)
    assert client.post(url, {"active": "0"}).status_code == 404  # not a member at all
    plain_admin = django_user_model.objects.create_user("pat")
    Membership.objects.create(project=project, user=plain_admin, role=Role.ADMIN)
    client.force_login(plain_admin)
    refused = client.post(url, {"active": "0"})
    assert refused.status_code == 403 and "Only site administrators" in refused.content.decode()
    assert "Deactivate" not in client.get(reverse("project_settings", args=[project.slug])).content.decode()
    client.force_login(site_admin)
    assert client.get(url).status_code == 405
    assert client.post(url, {"active": "maybe"}).status_code == 400
    own = project.memberships.get(user=site_admin)
    assert client.post(reverse("member_active", args=[project.slug, own.pk]), {"active": "0"}).status_code == 403
    boss = django_user_model.objects.create_superuser("boss", password="a-long-password")
    boss_membership = Membership.objects.create(project=project, user=boss, role=Role.ADMIN)
    assert client.post(reverse("member_active", args=[project.slug, boss_membership.pk]),
                       {"active": "0"}).status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(site_admin)
    assert strict.post(url, {"active": "0"}).status_code == 403
    reviewer.refresh_from_db()
    boss.refresh_from_db()
    assert reviewer.is_active and boss.is_active and site_admin.is_active


@pytest.mark.django_db
def test_unticking_active_in_djangos_admin_also_returns_the_items_they_held(client, project, reviewer,
                                                                          ready_items, django_user_model) -> None:
    from annotate import queue
    from annotate.models import Claim

    (held,) = ready_items(project, [0.1])
    assert queue.claim_next(project, reviewer) == held
    boss = django_user_model.objects.create_superuser("boss", password="a-long-password")
    client.force_login(boss)
    joined = reviewer.date_joined

    response = client.post(reverse("admin:auth_user_change", args=[reviewer.pk]), {
        "username": reviewer.username, "first_name": "", "last_name": "", "email": "",
        "date_joined_0": f"{joined:%Y-%m-%d}", "date_joined_1": f"{joined:%H:%M:%S}",
    }, follow=True)  # "is_active" left out: unticked

    assert response.status_code == 200
    assert "The 1 item rita was labelling went back to the queue." in response.content.decode()
    reviewer.refresh_from_db()
    assert not reviewer.is_active
    assert not Claim.objects.filter(reviewer=reviewer).exists()
