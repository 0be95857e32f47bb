"""Accounts for a team: creating reviewers' accounts and the one-time links with which they set a password; and
a limit on failed sign-ins, so a password cannot be guessed at the speed of the network.

A link is shown to the admin who asked for it, once, to pass on; with email set up (`TC_EMAIL_URL`) it is also
mailed to each account that has an address, and a forgotten password can be reset from the sign-in page. It is
Django's own password-reset token (`PasswordResetTokenGenerator`): nothing is stored; it stops working once its
password is set, once its user signs in, or after `PASSWORD_RESET_TIMEOUT` (`TC_PASSWORD_LINK_DAYS`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import smtplib
import time
from dataclasses import dataclass, replace
from importlib import import_module

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.core import mail
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode


def can_create(user) -> bool:
    """Creating accounts is a site permission (Django's `auth.add_user`), not a project role."""
    return user.has_perm("auth.add_user")


def may_issue_link(issuer, user) -> str | None:
    """Why `issuer` may not give `user` a set-password link, or None when they may.

    A link sets a password, so it is Django's `auth.change_user`; a superuser's account only by another superuser,
    and one's own password is changed on the account page, which asks for the current one.
    """
    name = user.get_username()
    refusal = _may_change(issuer, user, "give set-password links", f"gives {name} a set-password link",
                          own="Change your own password on your account page.")
    if refusal is None and not user.is_active:
        return f"{name}'s account is deactivated."
    return refusal


def may_switch(issuer, user) -> str | None:
    """Why `issuer` may not deactivate or reactivate `user`'s account, or None when they may: the same rule as for
    a link, and never one's own."""
    return _may_change(issuer, user, "deactivate or reactivate accounts",
                       f"deactivates or reactivates {user.get_username()}'s account",
                       own="You cannot deactivate your own account; ask another site administrator.")


def _may_change(issuer, user, act: str, superuser_act: str, *, own: str) -> str | None:
    """The rule for changing another's account: Django's `auth.change_user`, not on one's own, and a superuser's
    only by a superuser; the refusal in the words of the act."""
    if not issuer.has_perm("auth.change_user"):
        return f"Only site administrators (who may change users) {act}."
    if user.pk == issuer.pk:
        return own
    if user.is_superuser and not issuer.is_superuser:
        return f"Only a superuser {superuser_act}."
    return None


def deactivate(user) -> int:
    """Deactivate `user` for someone leaving the team: they can no longer sign in, their open sessions and API
    tokens stop working at their next request, and every item they were labelling goes back to its queue.
    Their answers, drafts and memberships are kept, so `reactivate` gives everything back. Returns how many
    items they held."""
    from annotate import hotpath, queue
    from annotate.models import Claim, Project

    with transaction.atomic():
        hotpath.lock_account(user.pk)  # a claim in flight waits for this and is refused, or is released below
        get_user_model().objects.filter(pk=user.pk).update(is_active=False)
        user.is_active = False
        held = Claim.objects.filter(reviewer=user, expires_at__gt=timezone.now()).count()
        for project in Project.objects.filter(items__claims__reviewer=user).distinct():
            queue.release_claims(project, user)
    end_sessions(user)
    return held


def end_sessions(user) -> int:
    """Delete `user`'s sessions. An inactive user's session signs nobody in, but it stays valid: reactivated, the
    account was signed in again in every browser it had been, without a password. Sessions are not stored by user,
    so each live one is read (a deactivation is rare; thousands of sessions take well under a second)."""
    from django.contrib.auth import SESSION_KEY
    from django.contrib.sessions.models import Session

    store = import_module(settings.SESSION_ENGINE).SessionStore
    ended = 0
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        if str(session.get_decoded().get(SESSION_KEY)) == str(user.pk):
            store(session.session_key).delete()  # the cache's copy too, with cached_db
            ended += 1
    return ended


def reactivate(user) -> None:
    """Let `user` sign in again, with the password they had (or a set-password link, if they never set one)."""
    get_user_model().objects.filter(pk=user.pk).update(is_active=True)
    user.is_active = True


def create(names: list[str]) -> list:
    """New accounts for `names`, each without a usable password until its owner follows their link. A name that is
    an email address is also the account's address, where its links can be mailed."""
    model = get_user_model()
    return [model.objects.create_user(name, email=name if is_address(name) else "", password=None)
            for name in names]


def is_address(text: str) -> bool:
    try:
        validate_email(text)
    except ValidationError:
        return False
    return True


def set_password_link(request, user) -> str:
    """The absolute address where `user` sets a new password (Django's password-reset confirmation)."""
    path = reverse("password_reset_confirm", kwargs={
        "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
        "token": default_token_generator.make_token(user),
    })
    return request.build_absolute_uri(path)


def link_days() -> float:
    """How many days a set-password link works (`TC_PASSWORD_LINK_DAYS`), as pages and messages say it."""
    return round(settings.PASSWORD_RESET_TIMEOUT / 86400, 1)


# -- links by email --------------------------------------------------------------------------------------------
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Link:
    """A user's set-password link, and what became of mailing it: `emailed_to` the address it went to, or
    `not_sent` why it did not (no address, refused, the server unusable); both empty when the site sends no email."""

    name: str
    url: str
    emailed_to: str = ""
    not_sent: str = ""


def links(request, users: list) -> list[Link]:
    """Each user's set-password link, mailed to those with an address when the site sends email.

    One connection to the mail server for them all; a server that refuses one address still gets the others, and
    a server that cannot be reached is tried once, not once per user. Nothing is lost when a message is not
    sent: the link is on the admin's page either way.
    """
    made = [Link(user.get_username(), set_password_link(request, user)) for user in users]
    if not settings.TC_EMAIL:
        return made
    result, connection, down = [], None, ""
    for user, link in zip(users, made, strict=True):
        why = down if user.email else "no email address"
        if not why:
            try:
                connection = connection or _open_mail()
                connection.send_messages([_link_message(request, user, link.url, connection)])
            except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as refused:
                log.warning("mail server refused the set-password link for %s: %s", link.name, refused)
                why = "the mail server refused the address"
            except (OSError, smtplib.SMTPException) as error:  # unreachable, timed out, rejected our login
                log.warning("could not send set-password links: %s", error)
                why = down = f"the mail server could not be used ({type(error).__name__})"
        result.append(replace(link, not_sent=why) if why else replace(link, emailed_to=user.email))
    if connection is not None:
        with contextlib.suppress(OSError, smtplib.SMTPException):  # every message is through or accounted for
            connection.close()
    return result


def _open_mail():
    connection = mail.get_connection(fail_silently=False)
    connection.open()
    return connection


def _link_message(request, user, url: str, connection) -> mail.EmailMessage:
    context = {"name": user.get_username(), "url": url, "site": request.get_host(), "days": link_days()}
    body = render_to_string("registration/set_password_email.txt", context)
    return mail.EmailMessage("Your set-password link for tensorcode annotate", body, to=[user.email],
                             connection=connection)


def send_forgotten(request, given: str) -> None:
    """Mail a set-password link to the account named `given` (its username or its email address), if it is active
    and has an address, at most once per `TC_RESET_EMAIL_MINUTES` so the form cannot flood anyone's inbox.

    The caller says the same thing whatever happens here: whether an account exists is not for a visitor to learn.
    """
    model = get_user_model()
    given = given.strip()
    user = model.objects.filter(username=given, is_active=True).first()
    if user is None and is_address(given):
        matches = list(model.objects.filter(email__iexact=given, is_active=True)[:2])
        user = matches[0] if len(matches) == 1 else None  # an address two accounts share names neither
    if user is None or not user.email:
        return
    key = f"reset-mailed:{user.pk}"
    if not cache.add(key, 1, timeout=int(settings.TC_RESET_EMAIL_MINUTES * 60)):
        return
    [link] = links(request, [user])
    if link.not_sent:  # the mail server failed: asking again must not wait for the window
        cache.delete(key)


# -- failed sign-ins -----------------------------------------------------------------------------------------------
def _window_key(username: str, address: str) -> str:
    # A username is the user's to type: hashed, any text makes a valid cache key.
    return "signin-window:" + hashlib.sha256(f"{username.casefold()}\0{address}".encode()).hexdigest()


def signin_wait(username: str, address: str) -> int:
    """Seconds until `username` may try to sign in again from `address` (0: now).

    After `TC_SIGNIN_FAILURES` failed sign-ins (10) within `TC_SIGNIN_LOCK_MINUTES` (15), that name is refused
    from that address until the window since the first failure has passed. Keyed by name and address, so
    somebody guessing at one account neither locks its owner out elsewhere nor slows anyone else.
    """
    key = _window_key(username, address)
    since = cache.get(key)
    if since is None or cache.get(f"{key}:{since!r}", 0) < settings.TC_SIGNIN_FAILURES:
        return 0
    return max(0, math.ceil(since + settings.TC_SIGNIN_LOCK_MINUTES * 60 - _now()))


def signin_failed(username: str, address: str) -> None:
    """Count a failed sign-in in the window its name and address have open, opening one at the first failure.

    The window's start and its count are written with `add` and `incr`, each one step on the cache server, so
    guesses sent at once to several web processes are all counted (reading the count and writing it back lost
    some); each window counts under a key of its own, so a new one never has to reset an old count.
    """
    key = _window_key(username, address)
    now = _now()
    window = settings.TC_SIGNIN_LOCK_MINUTES * 60
    since = now if cache.add(key, now, timeout=math.ceil(window)) else cache.get(key)
    if since is None or since + window <= now:  # closed just now, or left by a cache that has not dropped it yet
        since = now
        cache.set(key, since, timeout=math.ceil(window))
    counter, left = f"{key}:{since!r}", math.ceil(since + window - now)
    cache.add(counter, 0, timeout=left)
    try:
        cache.incr(counter)
    except ValueError:  # the window's count expired between the two calls
        cache.set(counter, 1, timeout=left)


def signin_succeeded(username: str, address: str) -> None:
    key = _window_key(username, address)
    since = cache.get(key)
    cache.delete_many([key] if since is None else [key, f"{key}:{since!r}"])


def _now() -> float:
    return time.time()
