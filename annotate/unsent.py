"""What a user typed into an item's forms and has not sent, kept on the server for their other browsers.

`static/drafts.js` keeps typing in the browser it was typed in and, for the forms below, sends it to
`POST /projects/<slug>/items/<id>/typed/` too, so that the user's other browsers restore it. A reviewer's answer
and skip boxes are kept with their claim (`queue.keep_typed`) and go with it. An admin's forms (the target
written when adjudicating, a refused item's fixed inputs) have no claim, so they are kept in `AdminTyping`, one
row per admin, item and form, until the form is sent, for as long as the browser keeps its own copy.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from annotate import queue
from annotate.models import AdminTyping, Answer, Item, Project

CLAIM_FORMS = ("answer", "skip")
ADMIN_FORMS = ("adjudication", "inputs")
KEPT_FOR = timedelta(days=7)  # as long as `static/drafts.js` keeps the browser's copy


def keep(project: Project, item: Item, user, typed: dict) -> bool:
    """Keep what `user` typed into `item`'s forms (`typed`: form -> fields, `forms.TypedForm`), each form where it
    lives; False, and a reviewer's forms not kept, without an active claim. PermissionDenied: an admin's form
    sent by a reviewer."""
    for_admin = {form: fields for form, fields in typed.items() if form in ADMIN_FORMS}
    if for_admin:
        keep_for_admin(project, item, user, for_admin)
        if len(for_admin) == len(typed):
            return True
    return queue.keep_typed(item, user, {form: fields for form, fields in typed.items() if form not in for_admin})


def claim_copy(viewer_typed: tuple | None, answer: Answer | None, now: datetime) -> dict[str, str]:
    """`server_copy` of a reviewer's typing kept on their claim (`(typed, typed_at)` as the item page reads it),
    unless their answer came after it."""
    if viewer_typed is None:
        return {}
    typed, typed_at = viewer_typed
    if answer is not None and answer.updated_at > typed_at:
        return {}
    return server_copy(typed, typed_at, now)


def keep_for_admin(project: Project, item: Item, user, typed: dict, *, now=None) -> None:
    """Keep what admin `user` typed into `item`'s admin forms (`typed`: form -> fields, `forms.TypedForm`)."""
    if not project.is_admin(user):
        raise PermissionDenied("Only the project's admins can do this.")
    now = now or timezone.now()
    for form, fields in typed.items():
        AdminTyping.objects.update_or_create(item=item, user=user, form=form,
                                             defaults={"fields": fields, "updated_at": now})
    # Typing never sent (the admin went elsewhere, another admin settled the item) would stay: past the week it
    # can no longer be restored, so it goes.
    AdminTyping.objects.filter(user=user, updated_at__lt=now - KEPT_FOR).delete()


def admin_copy(item: Item, user, form: str, *, after: datetime | None = None, now=None) -> dict[str, str]:
    """`{form: JSON}` for the page (`server_copy`) when `user` has typing of `form` kept for `item`, newer than
    `after` (what the form last saved, which came after it) and not older than the browser keeps its own."""
    now = now or timezone.now()
    row = AdminTyping.objects.filter(item=item, user=user, form=form, updated_at__gt=now - KEPT_FOR).first()
    if row is None or (after is not None and row.updated_at <= after):
        return {}
    return server_copy({form: row.fields}, row.updated_at, now)


def forget_for_admin(item: Item, user, form: str) -> None:
    """The form was sent: its kept typing goes."""
    AdminTyping.objects.filter(item=item, user=user, form=form).delete()


def server_copy(typed: dict, typed_at: datetime, now: datetime) -> dict[str, str]:
    """Each form's kept typing as `static/drafts.js` reads it from `data-draft-server`: its fields and its age in
    milliseconds (the browser dates it on its own clock, to compare with the copy it kept itself)."""
    age = settled_age(typed_at, now)
    return {form: json.dumps({"age": age, "fields": fields}) for form, fields in typed.items()}


def settled_age(settled_at: datetime | None, now: datetime) -> int | None:
    """How long ago (ms) the form's last send was stored, for `data-draft-settled`: a browser drops its own copy
    of typing older than that (typed before the work was done in another browser). None when never sent."""
    return None if settled_at is None else max(0, round((now - settled_at).total_seconds() * 1000))
