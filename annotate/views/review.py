"""The reviewer's workspace: claim the next item, answer it, skip it, go back, undo.

Every action answers an htmx request with the workspace fragment of the item to show next (and `HX-Push-Url`
so the address bar and Back follow), and a plain request with a redirect to that item's page, so the loop works
without JavaScript too. An invalid target is answered in place (`HX-Retarget` to the editor's error slot) so
nothing the reviewer typed is lost.
"""

from __future__ import annotations

import json
import math

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from annotate import imports, queue, unsent
from annotate.forms import SkipForm, TypedForm, parse_target
from annotate.models import FINAL_KINDS, FINISHED_STATUSES, Answer, Claim, Item, ItemStatus, Prediction, Project
from annotate.views import access, display, targets

# An answer posted while its project was being deleted: the deletion locked the item first, so the answer
# waited for it and then found the item gone.
GONE = "This item is gone: its project was deleted while you were answering."
PROJECT_GONE = "This project was deleted while you were reviewing it."


@require_POST
@login_required
@vary_on_headers("HX-Request")
def review_next(request: HttpRequest, slug: str) -> HttpResponse:
    """Claim the next item (least confident first) and show it; a held claim comes back first."""
    project = access.member_project(request, slug)
    return _show_next(request, project)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def item_detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """One item: inputs, prediction, trace, guidelines and (for its reviewer) the target editor."""
    project, item = access.member_item(request, slug, pk)
    return _workspace(request, project, item, read=(item.viewer_answer, item.viewer_latest_item_id))


@require_GET
@login_required
@vary_on_headers("HX-Request")
def item_trace(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """How the model got here: the prediction's traced steps, read only when the reviewer opens them.

    The trace is the largest thing stored with an item; keeping it off the item page keeps that page fast.
    """
    project, item = access.member_item(request, slug, pk)
    stored = Prediction.objects.filter(pk=item.prediction_id).values_list("trace", flat=True).first()
    context = {"project": project, "item": item, "trace": display.trace_view(stored)}
    template = "annotate/_trace.html" if request.htmx else "annotate/item_trace.html"
    return render(request, template, context)


@require_POST
@login_required
@vary_on_headers("HX-Request")
def item_submit(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Validate the editor's target like the trainer does and store it; then show the next item."""
    project, item = access.member_item(request, slug, pk)
    receipt = item.prediction.receipt if item.prediction else None
    try:
        target = parse_target(project.mode, request.POST, item.inputs, receipt)
        if request.POST.get("reclaim"):
            # The page showed this draft after the lease ended, and its reviewer submits it again: take the item
            # back if the overlap still has their place (otherwise the submit below keeps the draft and says why).
            queue.reclaim(item, request.user)
        outcome = queue.submit(item, request.user, target)
    except ValidationError as exc:
        return _invalid(request, project, item, " ".join(exc.messages))
    except queue.InvalidTarget as exc:
        return _invalid(request, project, item, f"The tool would not train on this target: {exc}")
    except Item.DoesNotExist:
        raise Http404(GONE) from None
    return _after_answer(request, project, item, outcome)


@require_POST
@login_required
@vary_on_headers("HX-Request")
def item_skip(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Skip the item with a reason; then show the next item."""
    project = access.member_project(request, slug)
    item = access.project_item(project, pk)
    form = SkipForm(request.POST)
    if not form.is_valid():
        return _invalid(request, project, item, " ".join(form.errors.get("reason", ["Give a reason to skip."])))
    try:
        if request.POST.get("reclaim"):  # as in item_submit: the draft's page, after its lease ended
            queue.reclaim(item, request.user)
        outcome = queue.skip(item, request.user, form.cleaned_data["reason"])
    except Item.DoesNotExist:
        raise Http404(GONE) from None
    return _after_answer(request, project, item, outcome)


@require_POST
@login_required
@vary_on_headers("HX-Request")
def item_keep(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Renew the reviewer's lease on an item they are still working on (the page asks while they type, or `k`).

    htmx gets the lease line again: the new end, or (409) why the item can no longer be theirs, said in place.
    """
    project = access.member_project(request, slug)
    item = access.project_item(project, pk)
    try:
        expires, reason = queue.keep(item, request.user), ""
    except queue.NotKept as exc:
        expires, reason = None, str(exc)
    except Item.DoesNotExist:
        raise Http404(GONE) from None
    if not request.htmx:
        if reason:
            messages.error(request, reason)
        return redirect("item_detail", project.slug, item.pk)
    context = {"project": project, "item": item, "claim_expires_at": expires, "lease_lost": reason,
               "lease_seconds_left": project.lease_seconds, "taken_back": bool(request.POST.get("taken_back"))
               and not reason}
    return render(request, "annotate/_lease.html", context, status=409 if reason else 200)


@require_POST
@login_required
def item_typed(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Keep what the user typed into the item's forms and has not sent (the page sends it as they type), so their
    other browsers show it (`annotate.unsent`). 204 when kept; 409 for a reviewer's forms without an active claim
    (the typing stays in this browser only); 403 for an admin's forms sent by a reviewer; 400 or 413, saying why,
    for what is not the page's own shape."""
    project = access.member_project(request, slug)
    item = access.project_item(project, pk)
    form = TypedForm(request.POST)
    if not form.is_valid():
        message = " ".join(form.errors.get("typed", ["typed: missing"]))
        status = 413 if form.has_error("typed", "max_length") else 400
        return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
    if not unsent.keep(project, item, request.user, form.cleaned_data["typed"]):
        return HttpResponse("You hold no active claim on this item: what you typed stays in this browser only.",
                            status=409, content_type="text/plain; charset=utf-8")
    return HttpResponse(status=204)


@require_POST
@login_required
@vary_on_headers("HX-Request")
def item_fix_inputs(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """An admin's fix of a refused item's inputs: checked as an import checks them, then predicted again."""
    project = access.admin_project(request, slug)
    item = access.project_item(project, pk)
    text = request.POST.get("inputs", "")
    try:
        imports.fix_refused(project, item.pk, imports.parse_line(text.encode()))  # ValueError: not JSON, say
    except imports.NotRefused as exc:  # a version predicted it meanwhile, or another admin fixed it
        return _navigate(request, project, access.project_item(project, pk), notice=f"Not saved: {exc}.")
    except ValueError as exc:  # not JSON, or inputs the tool refuses: what they typed stays in the box
        message = f"Not saved: {exc}"
        if request.htmx:
            return _invalid(request, project, item, message)
        return _workspace(request, project, item, error=message, status=400, fix_text=text)
    unsent.forget_for_admin(item, request.user, "inputs")
    return _navigate(request, project, access.project_item(project, pk),
                     notice="Inputs saved: the model predicts this item again.")


@require_POST
@login_required
@vary_on_headers("HX-Request")
def review_undo(request: HttpRequest, slug: str) -> HttpResponse:
    """Undo the reviewer's last submission: it becomes a draft and its item is shown to change it."""
    project = access.member_project(request, slug)
    answer = queue.undo_last(project, request.user)
    if answer is None:
        messages.info(request, "Nothing to undo.")
        return _show_next(request, project)
    item = access.project_item(project, answer.item_id)
    notice = "Undone: your answer is back as a draft. Change it and submit, or skip."
    if not queue.holds_claim(item, request.user):
        notice = "Undone: your answer is kept as a draft, but the item is now with other reviewers."
    return _navigate(request, project, item, notice=notice)


# -- responses ---------------------------------------------------------------------------------------------------
def _after_answer(request: HttpRequest, project: Project, item: Item, outcome: queue.Outcome) -> HttpResponse:
    if outcome.status == "draft":
        return _navigate(request, project, item, error=outcome.message)
    messages.success(request, f"Item {item.pk}: {outcome.message}")
    return _show_next(request, project)


def _show_next(request: HttpRequest, project: Project) -> HttpResponse:
    item_id = queue.claim_next_id(project, request.user)
    if item_id is None:
        return _queue_empty(request, project)
    if not request.htmx:
        return redirect("item_detail", project.slug, item_id)
    # Everything the workspace shows in one statement, as for the item page (the claim's own write returns an id).
    project, item = access.member_item(request, project.slug, item_id)
    return _navigate(request, project, item, read=(item.viewer_answer, item.viewer_latest_item_id))


def _navigate(request: HttpRequest, project: Project, item: Item, **extra) -> HttpResponse:
    """Show `item`: the fragment for htmx (with the new address), a redirect to its page otherwise."""
    url = reverse("item_detail", args=[project.slug, item.pk])
    if request.htmx:
        response = _workspace(request, project, item, **extra)
        response["HX-Push-Url"] = url
        return response
    for level, text in (("error", extra.get("error")), ("warning", extra.get("notice"))):
        if text:
            getattr(messages, level)(request, text)
    return redirect(url)


def _invalid(request: HttpRequest, project: Project, item: Item, message: str) -> HttpResponse:
    """Say what is wrong without touching the editor, so the reviewer's input stays as it is."""
    if request.htmx:
        response = render(request, "annotate/_editor_error.html", {"error": message})
        response["HX-Retarget"] = "#editor-error"
        response["HX-Reswap"] = "innerHTML"
        return response
    return _workspace(request, project, item, error=message, status=400)


def _queue_empty(request: HttpRequest, project: Project) -> HttpResponse:
    if not Project.objects.filter(pk=project.pk).exists():  # deleted since the request began
        raise Http404(PROJECT_GONE)
    user = request.user
    answered = Answer.objects.filter(item=OuterRef("pk"), reviewer=user, kind__in=FINAL_KINDS)
    context = {
        "project": project,
        "oob": bool(request.htmx),
        "waiting": Item.objects.filter(project=project, status=ItemStatus.PENDING).count(),
        # Ready items this reviewer could still label, none free now: other reviewers hold every place on them.
        "held": Item.objects.filter(project=project, status=ItemStatus.READY).exclude(Exists(answered)).count(),
        "previous_url": _previous_url(project, user, None),
    }
    context["can_undo"] = context["previous_url"] is not None
    template = "annotate/_queue_empty.html" if request.htmx else "annotate/queue_empty.html"
    return render(request, template, context)


def _workspace(request: HttpRequest, project: Project, item: Item, *, error: str = "", notice: str = "",
               status: int = 200, read: tuple | None = None, fix_text: str | None = None) -> HttpResponse:
    """`read`: the viewer's answer and latest answered item, when they came with the item (the item page).
    `fix_text`: what an admin typed as a refused item's inputs, shown again with the error."""
    user = request.user
    is_admin = project.is_admin(user)
    now = timezone.now()
    answer, previous_pk = queue.answer_and_previous(project, user, item, read=read)
    if hasattr(item, "viewer_claim_expires"):  # read with the item (item page, claim-next)
        claim_expires = item.viewer_claim_expires
    else:
        claim = Claim.objects.filter(item=item, reviewer=user, expires_at__gt=now).first()
        claim_expires = claim.expires_at if claim else None
    prediction = item.prediction
    receipt = prediction.receipt if prediction else None
    draft = answer.target if answer is not None else None
    previous_url = reverse("item_detail", args=[project.slug, previous_pk]) if previous_pk else None
    can_edit = claim_expires is not None or answer is not None
    read_only_reason = ""
    if not can_edit:
        if item.status in FINISHED_STATUSES:
            read_only_reason = "This item is finished."
        elif item.status == ItemStatus.PENDING:
            read_only_reason = "This item waits for the model's prediction."
        elif item.status == ItemStatus.REFUSED:
            read_only_reason = (f"The model refused this item's inputs ({item.refusal}). The next model version "
                                "promoted tries them again" + (", or fix them below." if is_admin else "."))
        else:
            read_only_reason = "This item is not assigned to you: review the next item to label."
    if answer is not None and answer.kind == "draft" and claim_expires is None and not error:
        notice = notice or ("Your earlier work on this item is kept as a draft; your claim on it has ended."
                            + (" Submit it, or press k, to take the item back, if a reviewer's place on it is still"
                               " free."
                               if item.status == ItemStatus.READY else ""))
    context = {
        "project": project,
        "item": item,
        "answer": answer,
        "prediction": prediction,
        "claim_expires_at": claim_expires,
        # Seconds, not the time: the page counts down on the reviewer's clock, which need not match the server's.
        # Rounded up, so that when the page says the lease ended, it has.
        "lease_seconds_left": max(0, math.ceil((claim_expires - now).total_seconds())) if claim_expires else None,
        "inputs": display.inputs_view(item.inputs, receipt),
        "receipt": display.receipt_view(receipt, item.inputs, project.mode,
                                        prediction.confidence if prediction else None),
        "editor": display.editor_view(project.mode, item.inputs, receipt, draft),
        "can_edit": can_edit,
        "reclaim": (answer is not None and answer.kind == "draft" and claim_expires is None
                    and item.status == ItemStatus.READY),
        "read_only_reason": read_only_reason,
        "previous_url": previous_url,
        "can_undo": previous_url is not None or bool(answer and answer.is_final),
        "error": error,
        "notice": notice,
        "oob": bool(request.htmx),
        # Admins see everyone's work on the item (reviewers see only their own), and fix a refused item's inputs.
        "all_answers": _all_answers(project, item) if is_admin else None,
        "holders": _holders(item, now) if is_admin else None,
        # The viewer's own answer's earlier states; read only when it changed since it was first given.
        "own_history": (display.answer_history(answer.revisions.all(), targets.liner(project.mode, item.inputs))
                        if answer is not None and answer.updated_at != answer.created_at else []),
        "fix_text": _fix_text(item, fix_text) if is_admin else None,
        "draft_settled": unsent.settled_age(answer.updated_at if answer is not None else None, now),
    }
    if claim_expires is not None:  # what they type is kept with the claim, for their other browsers
        context["typed_url"] = reverse("item_typed", args=[project.slug, item.pk])
        context["server_typed"] = unsent.claim_copy(getattr(item, "viewer_typed", None), answer, now)
    elif context["fix_text"] is not None and fix_text is None:  # an admin's fix of the inputs, kept until saved
        context["typed_url"] = reverse("item_typed", args=[project.slug, item.pk])
        context["server_typed"] = unsent.admin_copy(item, user, "inputs", now=now)
    template = "annotate/_item.html" if request.htmx else "annotate/item.html"
    return render(request, template, context, status=status)


def _fix_text(item: Item, typed: str | None) -> str | None:
    """What a refused item's box of inputs holds: what the admin typed, else its inputs; None for other items."""
    if item.status != ItemStatus.REFUSED:
        return None
    return typed if typed is not None else json.dumps(item.inputs, indent=2, ensure_ascii=False)


def _all_answers(project: Project, item: Item) -> list[dict]:
    """Every reviewer's answer, the target read as the adjudication page reads it (the candidate's text, not
    only its id), so an admin sees on the item itself what the reviewers disagree about."""
    return [
        {"reviewer": a.reviewer.get_username(), "kind": a.get_kind_display(),
         "target": None if a.target is None else targets.describe(project.mode, item.inputs, a.target),
         "skip_reason": a.skip_reason, "updated_at": a.updated_at, "source": a.source,
         "history": display.answer_history(a.revisions.all(), targets.liner(project.mode, item.inputs))}
        for a in item.answers.select_related("reviewer").prefetch_related("revisions").order_by("updated_at", "id")
    ]


def _holders(item: Item, now) -> list[dict]:
    """Who holds the item now (leases not ended): with overlap above 1, whose answers are still to come."""
    return [{"reviewer": c.reviewer.get_username(), "until": c.expires_at}
            for c in item.claims.filter(expires_at__gt=now).select_related("reviewer").order_by("expires_at")]


def _previous_url(project: Project, user, item: Item | None) -> str | None:
    previous = queue.previous(project, user, before=item)
    return reverse("item_detail", args=[project.slug, previous.pk]) if previous else None
