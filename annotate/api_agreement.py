"""The JSON API's agreement and adjudication endpoints: what the agreement, disagreement and adjudication pages
show and do, for a project admin's token (`annotate.api` authenticates; a reviewer's token gets 403).

The numbers come from the same services as the pages (`agreement.cached_project_report`,
`adjudication.disagreement_counts`, `adjudication.adjudicate`), so the two never disagree.
"""

from __future__ import annotations

import json
from collections import defaultdict

from django.db.models import Count
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from annotate import adjudication, agreement
from annotate.api import _admin_project, _error, _json_body, answer_json, token_required
from annotate.models import FINAL_KINDS, Adjudication, Answer, ApiToken, Item

PAGE_SIZE = 50
MAX_BODY_BYTES = 1024 * 1024  # a written target (a text, a mask), like an export's request: far below this
_KINDS = ("target", "answer", "distribution")


@require_GET
@token_required
def project_agreement(request: HttpRequest, token: ApiToken, slug: str) -> JsonResponse:
    """`GET /api/projects/<slug>/agreement`: the agreement page's figures, unrounded.

    `kappa` (Fleiss') and each pair's `kappa` (Cohen's) are null unless the measure is categorical, or when
    kappa is undefined; `percent` is null with nothing compared. `computed_at` is when the figures were
    computed; `stale` is true when answers changed since (a slow report is reused for up to 30 s).
    """
    project = _admin_project(token, slug, "reading agreement of")
    if isinstance(project, JsonResponse):
        return project
    report = agreement.cached_project_report(project)
    return JsonResponse({
        "measure": report.measure,
        "measure_name": agreement.MEASURE_NAMES[report.measure],
        "items": report.items,
        "agreed": report.agreed,
        "percent": report.percent,
        "kappa": report.kappa,
        "mean_score": report.mean_score,
        "pairs": [
            {"reviewers": list(p.reviewers), "items": p.items, "agreed": p.agreed, "percent": p.percent,
             "score": p.score, "kappa": p.kappa}
            for p in report.pairs
        ],
        "reviewers": [
            {"reviewer": r.reviewer, "co_reviewers": r.co_reviewers, "items": r.items, "agreed": r.agreed,
             "percent": r.percent, "score": r.score}
            for r in agreement.by_reviewer(report.pairs)
        ],
        **adjudication.disagreement_counts(project),
        "computed_at": report.computed_at.isoformat() if report.computed_at else None,
        "stale": report.stale,
    })


@require_GET
@token_required
def disagreements(request: HttpRequest, token: ApiToken, slug: str) -> JsonResponse:
    """`GET /api/projects/<slug>/disagreements?after=<id>&show=all|open`: one page of items whose reviewers
    disagree, oldest first, each with every reviewer's final answer and its adjudication (null while open).

    `next` is the `after` of the following page, null on the last; `show=open` leaves out adjudicated items.
    """
    project = _admin_project(token, slug, "listing disagreements of")
    if isinstance(project, JsonResponse):
        return project
    after, show = request.GET.get("after", ""), request.GET.get("show", "all")
    errors = {}
    if after and not after.isdigit():
        errors["after"] = f"expected an item id (the previous page's 'next'), got {after!r}"
    if show not in ("all", "open"):
        errors["show"] = f"expected 'all' or 'open', got {show!r}"
    if errors:
        return _error(400, "invalid parameters", errors=errors)
    items = Item.objects.filter(project=project, disagreement=True)
    if show == "open":
        items = items.filter(adjudication__isnull=True)
    if after:
        items = items.filter(pk__gt=int(after))
    ids = list(items.order_by("id").values_list("pk", flat=True)[:PAGE_SIZE + 1])
    more, ids = len(ids) > PAGE_SIZE, ids[:PAGE_SIZE]
    answers = defaultdict(list)
    for answer in (Answer.objects.filter(item_id__in=ids, kind__in=FINAL_KINDS).select_related("reviewer")
                   .order_by("reviewer__username", "id")):
        answers[answer.item_id].append(answer_json(answer))
    settled = {a.item_id: a for a in Adjudication.objects.filter(item_id__in=ids).select_related("adjudicator")
               .annotate(revision=Count("revisions"))}
    return JsonResponse({
        "items": [
            {"id": pk, "answers": answers[pk], "adjudicated": pk in settled,
             "adjudication": adjudication_json(settled[pk], settled[pk].revision) if pk in settled else None}
            for pk in ids
        ],
        "next": ids[-1] if more else None,
    })


@require_POST
@token_required
def adjudicate(request: HttpRequest, token: ApiToken, slug: str, item_id: int) -> JsonResponse:
    """`POST /api/projects/<slug>/items/<id>/adjudication` with exactly one of `{"target": ...}`,
    `{"answer": <answer id>}` or `{"distribution": true}` (ranking tools), and an optional `"note"`.

    201 with the stored adjudication (200 when it already was this target); 400 naming the problem, with
    nothing stored: the adjudication service decides, as it does for the adjudication page.
    """
    project = _admin_project(token, slug, "adjudicating in")
    if isinstance(project, JsonResponse):
        return project
    item = Item.objects.filter(project=project, pk=item_id).first()
    if item is None:
        return _error(404, f"no item {item_id} in project {slug!r}")
    body = _json_body(request, MAX_BODY_BYTES,
                      too_large=f"request body larger than {MAX_BODY_BYTES} bytes, the limit of an adjudication")
    if isinstance(body, JsonResponse):
        return body
    arguments = _adjudication_arguments(item, body)
    if isinstance(arguments, str):
        return _error(400, arguments)
    try:
        result = adjudication.adjudicate(item, token.user, **arguments)
    except adjudication.InvalidTarget as exc:
        return _error(400, f"target: the tool would not train on this target: {exc}")
    except ValueError as exc:  # NoDisagreement, a skip picked, the distribution of a tool that does not rank
        return _error(400, str(exc))
    stored = result.adjudication
    return JsonResponse({
        "item": item.pk,
        "status": result.status,
        "message": result.message,
        "adjudication": adjudication_json(stored, stored.revisions.count()),
    }, status=200 if result.status == "unchanged" else 201)


def adjudication_json(adjudication: Adjudication, revision: int) -> dict:
    """An item's adjudication: `kind` is picked | written | distribution, `answer` the picked answer's id,
    `revision` how many targets it has had (1 until it is adjudicated again)."""
    return {
        "kind": adjudication.kind,
        "target": adjudication.target,
        "source": adjudication.source,
        "answer": adjudication.chosen_answer_id,
        "admin": adjudication.adjudicator.get_username(),
        "note": adjudication.note,
        "revision": revision,
        "updated_at": adjudication.updated_at.isoformat(),
    }


def _adjudication_arguments(item: Item, body) -> dict | str:
    """`adjudicate`'s keyword arguments from the request body, or what is wrong with it."""
    if not isinstance(body, dict):
        return "expected a JSON object with one of 'target', 'answer' or 'distribution'"
    unknown = sorted(set(body) - {*_KINDS, "note"})
    if unknown:
        return (f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                f"valid fields: answer, distribution, note, target")
    given = [name for name in _KINDS if name in body]
    if len(given) != 1:
        return ("missing field: give one of 'target', 'answer' or 'distribution'" if not given else
                f"give exactly one of 'target', 'answer' or 'distribution', got {', '.join(given)}")
    note = body.get("note", "")
    if not isinstance(note, str) or len(note) > 500:
        return "note: expected a string of at most 500 characters"
    if "target" in body:
        if body["target"] is None:
            return "target: null is not a target; give the target in the tool's form, or 'answer' to pick one"
        return {"target": body["target"], "note": note}
    if "distribution" in body:
        if body["distribution"] is not True:
            return f"distribution: expected true, got {json.dumps(body['distribution'])}"
        return {"distribution": True, "note": note}
    answer_id = body["answer"]
    if not isinstance(answer_id, int) or isinstance(answer_id, bool):
        return f"answer: expected an answer id (an integer), got {json.dumps(answer_id)}"
    answer = Answer.objects.filter(pk=answer_id, item=item).first()
    if answer is None:
        return f"answer: {answer_id} is not an answer to item {item.pk}"
    return {"answer": answer, "note": note}
