"""Set-password links by email, when the site sends email (`TC_EMAIL_URL`): an admin's new accounts and new links
are mailed to each account's address, a forgotten password is reset from the sign-in page, and each user keeps
their address on their account page. A mail server that refuses or cannot be reached loses nothing: the links
stay on the admin's page. pytest-django keeps every message in `mail.outbox` (Django's locmem backend)."""

from __future__ import annotations

import re
import smtplib

import pytest
from django.core import mail
from django.core.mail.backends.locmem import EmailBackend
from django.test import Client
from django.urls import reverse

from annotate import accounts
from tests.annotate.conftest import NEW_PASSWORD as PASSWORD
from tests.annotate.conftest import links_in, set_password


@pytest.fixture
def sends_email(settings):
    settings.TC_EMAIL = True
    settings.DEFAULT_FROM_EMAIL = "Annotate <annotate@example.com>"


def mailed_link(message) -> str:
    [link] = re.findall(r"http://testserver/accounts/reset/\S+", message.body)
    return link


def text(response) -> str:
    return " ".join(response.content.decode().split())


@pytest.mark.django_db
def test_new_accounts_named_by_address_get_their_link_by_email(client, project, site_admin, sends_email,
                                                               django_user_model) -> None:
    client.force_login(site_admin)
    created = client.post(reverse("member_add", args=[project.slug]),
                          {"username": "carol@example.com dan", "role": "reviewer", "create": "on"})

    assert created.status_code == 200
    body = text(created)
    assert "1 of 2 links were emailed; send the others yourself." in body
    assert "sent to carol@example.com" in body and "not sent: no email address" in body
    [message] = mail.outbox
    assert message.to == ["carol@example.com"] and message.from_email == "Annotate <annotate@example.com>"
    assert message.subject == "Your set-password link for tensorcode annotate"
    assert "Your username is carol@example.com." in message.body and "for 7 days" in message.body
    assert mailed_link(message) == links_in(created.content.decode())[0]  # the page keeps it too
    carol = django_user_model.objects.get(username="carol@example.com")
    assert carol.email == "carol@example.com"
    assert django_user_model.objects.get(username="dan").email == ""

    assert "Password set" in text(set_password(Client(), mailed_link(message)))
    assert Client().login(username="carol@example.com", password=PASSWORD)


@pytest.mark.django_db
def test_a_new_link_for_a_member_with_an_address_is_mailed(client, project, site_admin, reviewer,
                                                           sends_email) -> None:
    reviewer.email = "rita@example.com"
    reviewer.save()
    client.force_login(site_admin)
    issued = client.post(reverse("member_link", args=[project.slug, project.memberships.get(user=reviewer).pk]))

    assert "The link was emailed." in text(issued) and "sent to rita@example.com" in text(issued)
    [message] = mail.outbox
    assert message.to == ["rita@example.com"] and "Hello rita," in message.body
    set_password(Client(), mailed_link(message))
    assert Client().login(username="rita", password=PASSWORD)


@pytest.mark.django_db
def test_without_email_nothing_is_sent_and_the_page_says_nothing_of_it(client, project, site_admin, reviewer,
                                                                       settings) -> None:
    assert settings.TC_EMAIL is False  # no TC_EMAIL_URL: the site's default
    reviewer.email = "rita@example.com"
    reviewer.save()
    client.force_login(site_admin)
    issued = client.post(reverse("member_link", args=[project.slug, project.memberships.get(user=reviewer).pk]))

    assert issued.status_code == 200 and len(links_in(issued.content.decode())) == 1
    assert "emailed" not in text(issued) and "<th scope=\"col\">Email</th>" not in issued.content.decode()
    assert mail.outbox == []


class _Bouncing(EmailBackend):
    """A mail server that refuses one address and takes the others."""

    def send_messages(self, messages):
        if any("bounce" in address for message in messages for address in message.to):
            raise smtplib.SMTPRecipientsRefused({"bounce@example.com": (550, b"no such mailbox")})
        return super().send_messages(messages)


@pytest.mark.django_db
def test_a_refused_address_still_lets_the_others_go_and_keeps_every_link(client, project, site_admin,
                                                                         sends_email, monkeypatch) -> None:
    monkeypatch.setattr(accounts, "_open_mail", _Bouncing)
    client.force_login(site_admin)
    created = client.post(reverse("member_add", args=[project.slug]), {
        "username": "bounce@example.com ok@example.com", "role": "reviewer", "create": "on"})

    assert created.status_code == 200
    assert "not sent: the mail server refused the address" in text(created)
    assert "sent to ok@example.com" in text(created) and "1 of 2 links were emailed" in text(created)
    assert [m.to for m in mail.outbox] == [["ok@example.com"]]
    assert len(links_in(created.content.decode())) == 2


@pytest.mark.django_db
def test_a_mail_server_that_cannot_be_reached_is_tried_once_and_the_links_stay_on_the_page(
        client, project, site_admin, sends_email, settings) -> None:
    # A real SMTP connection to a port nobody listens on: refused at once.
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 2
    client.force_login(site_admin)
    created = client.post(reverse("member_add", args=[project.slug]), {
        "username": "one@example.com two@example.com", "role": "reviewer", "create": "on"})

    assert created.status_code == 200
    assert "No link was emailed; send them yourself." in text(created)
    assert text(created).count("not sent: the mail server could not be used (ConnectionRefusedError)") == 2
    [link, _] = links_in(created.content.decode())
    assert "Password set" in text(set_password(Client(), link))


@pytest.mark.django_db
def test_a_forgotten_password_is_reset_by_email_by_name_or_address(client, reviewer, sends_email,
                                                                   fresh_cache) -> None:
    reviewer.email = "Rita@Example.com"
    reviewer.save()
    page = client.get(reverse("password_reset"))
    assert page.status_code == 200 and "Username or email address" in text(page)
    assert "This site sends no email" not in text(page)

    sent = client.post(reverse("password_reset"), {"name": "rita"})
    assert sent.status_code == 200 and "a link to set a new password is on its way" in text(sent)
    [message] = mail.outbox
    assert message.to == ["Rita@Example.com"]
    set_password(Client(), mailed_link(message))
    assert Client().login(username="rita", password=PASSWORD)

    mail.outbox.clear()
    client.post(reverse("password_reset"), {"name": "rita@example.com"})
    assert mail.outbox == []  # asked again within TC_RESET_EMAIL_MINUTES: nothing more in the inbox
    fresh_cache.clear()  # the window has passed
    client.post(reverse("password_reset"), {"name": "rita@example.com"})  # the address, in any case
    [message] = mail.outbox
    assert message.to == ["Rita@Example.com"]


@pytest.mark.django_db
def test_a_forgotten_password_request_tells_nothing_about_who_has_an_account(client, reviewer, second_reviewer,
                                                                             django_user_model, sends_email,
                                                                             fresh_cache) -> None:
    second_reviewer.email = "shared@example.com"
    second_reviewer.save()
    django_user_model.objects.create_user("twin", email="shared@example.com")
    django_user_model.objects.create_user("gone", email="gone@example.com", is_active=False)
    answers = set()
    for name in ("nobody", "rita", "shared@example.com", "gone", "gone@example.com", "not an address@"):
        response = client.post(reverse("password_reset"), {"name": name})
        assert response.status_code == 200
        answers.add(re.search(r"<main.*</main>", text(response)).group())  # the page, less its masked CSRF token

    assert len(answers) == 1  # the same page for each
    assert mail.outbox == []  # no account, no address, an address two accounts share, deactivated

    empty = client.post(reverse("password_reset"), {"name": "  "})
    assert empty.status_code == 400 and "This field is required." in text(empty)


@pytest.mark.django_db
def test_everyone_keeps_their_address_on_the_account_page(client, reviewer, sends_email) -> None:
    client.force_login(reviewer)
    page = client.get(reverse("password_change"))
    assert "Email address" in text(page) and 'id="email-form"' in page.content.decode()

    bad = client.post(reverse("account_email"), {"email": "rita at example", "password": "a-long-password"})
    assert bad.status_code == 400 and "Enter a valid email address." in text(bad)
    # Where a password can be reset is the account's owner's to say: their password is asked for.
    for wrong in ({"email": "mallory@example.com"}, {"email": "mallory@example.com", "password": "guess"}):
        refused = client.post(reverse("account_email"), wrong)
        assert refused.status_code == 400
        assert ("This field is required." if "password" not in wrong
                else "That is not your password; the address is unchanged.") in text(refused)
    reviewer.refresh_from_db()
    assert reviewer.email == ""
    saved = client.post(reverse("account_email"), {"email": "rita@example.com", "password": "a-long-password"},
                        follow=True)
    assert "Set-password links for you now go to rita@example.com." in text(saved)
    reviewer.refresh_from_db()
    assert reviewer.email == "rita@example.com"
    assert 'value="rita@example.com"' in client.get(reverse("password_change")).content.decode()

    removed = client.post(reverse("account_email"), {"email": "", "password": "a-long-password"}, follow=True)
    assert "Your account has no email address now" in text(removed)
    reviewer.refresh_from_db()
    assert reviewer.email == ""

    client.logout()
    assert client.post(reverse("account_email"), {"email": "x@example.com"})["Location"].startswith(
        reverse("login"))


@pytest.mark.django_db
def test_without_email_the_account_page_asks_for_no_address(client, reviewer) -> None:
    client.force_login(reviewer)
    assert 'id="email-form"' not in client.get(reverse("password_change")).content.decode()


@pytest.mark.django_db
def test_a_forgotten_password_asked_for_while_the_mail_server_is_down_can_be_asked_for_again(
        client, reviewer, sends_email, settings, fresh_cache) -> None:
    reviewer.email = "rita@example.com"
    reviewer.save()
    locmem = settings.EMAIL_BACKEND
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 2
    assert client.post(reverse("password_reset"), {"name": "rita"}).status_code == 200
    assert mail.outbox == []

    settings.EMAIL_BACKEND = locmem  # the server is back
    client.post(reverse("password_reset"), {"name": "rita"})
    [message] = mail.outbox
    assert message.to == ["rita@example.com"]
