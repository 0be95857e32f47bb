"""Accounts for a team: creating reviewers' accounts and the one-time links with which they set a password.

The site sends no email, so a link is shown to the admin who asked for it, once, to pass on. It is Django's own
password-reset token (`PasswordResetTokenGenerator`): nothing is stored; it stops working once its password is
set, once its user signs in, or after `PASSWORD_RESET_TIMEOUT` (`TC_PASSWORD_LINK_DAYS`).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.urls import reverse
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
    if not issuer.has_perm("auth.change_user"):
        return "Only site administrators (who may change users) give set-password links."
    if user.pk == issuer.pk:
        return "Change your own password on your account page."
    if user.is_superuser and not issuer.is_superuser:
        return f"Only a superuser gives {user.get_username()} a set-password link."
    if not user.is_active:
        return f"{user.get_username()}'s account is deactivated."
    return None


def create(names: list[str]) -> list:
    """New accounts for `names`, each without a usable password until its owner follows their link."""
    model = get_user_model()
    return [model.objects.create_user(name, password=None) for name in names]


def set_password_link(request, user) -> str:
    """The absolute address where `user` sets a new password (Django's password-reset confirmation)."""
    path = reverse("password_reset_confirm", kwargs={
        "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
        "token": default_token_generator.make_token(user),
    })
    return request.build_absolute_uri(path)
