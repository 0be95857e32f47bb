"""Agreement between a project's reviewers, the items where they disagree, and adjudicating one (admins only).

Every view checks the project role first: a non-member gets 404, a reviewer 403. Adjudicating answers htmx with
the adjudication workspace again (its message says what was stored) and a plain form with a redirect to it, so
the page works without JavaScript; a refused target is answered in place, so nothing the admin wrote is lost.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from annotate import adjudication, agreement, unsent
from annotate.forms import parse_target
from annotate.models import Adjudication, Answer, AnswerKind, Item, Project
from annotate.views import access, display, targets

PER_PAGE = 50
CHARTED_PAIRS = 12
_SCORE_LABELS = {"mask": "mean Jaccard overlap", "text": "mean text similarity",
                 "numeric": "mean share of outcomes within tolerance"}
_EXPLANATIONS = {
    "categorical": "Two reviewers agree when they chose the same label; a distribution counts as its most likely "
                   "candidate.",
    "mask": "The score of two masks is the size of the intersection of their relevant (query, document) cells "
            "over the size of their union; they agree when it is 1.",
    "text": "The score of two texts is difflib's ratio after collapsing whitespace and case; they agree when the "
            "normalized texts are equal.",
    "numeric": f"Two reviewers agree when every outcome they both gave differs by at most "
               f"{agreement.OUTCOME_TOLERANCE:g}; the score is the fraction that does.",
}


@require_GET
@login_required
def agreement_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Overall agreement, kappa for categorical targets, a table and a chart per reviewer pair."""
    project = access.admin_project(request, slug)
    report = agreement.cached_project_report(project)
    counts = adjudication.disagreement_counts(project)
    pairs = [
        {"a": p.reviewers[0], "b": p.reviewers[1], "items": p.items, "agreed": p.agreed,
         "percent": targets.percent(p.percent), "bar": f"{2 * (p.percent or 0):.1f}", "score": targets.fixed(p.score),
         "kappa": targets.fixed(p.kappa), "kappa_words": targets.kappa_words(p.kappa), "raw": p.percent or 0.0}
        for p in report.pairs
    ]
    # The chart draws every pair of a small team; of a big one, the pairs agreeing least (the table has them all).
    charted = pairs if len(pairs) <= CHARTED_PAIRS else sorted(pairs, key=lambda p: (p["raw"], -p["items"]))[
        :CHARTED_PAIRS]
    charted = [{**p, "y": 24 * n} for n, p in enumerate(charted)]
    reviewers = [
        {"name": r.reviewer, "co_reviewers": r.co_reviewers, "items": r.items, "agreed": r.agreed,
         "percent": targets.percent(r.percent), "width": f"{r.percent or 0:.1f}", "score": targets.fixed(r.score)}
        for r in agreement.by_reviewer(report.pairs)
    ]
    context = {
        "project": project,
        "report": report,
        "categorical": report.measure == "categorical",
        "measure_title": agreement.MEASURE_NAMES[report.measure],
        "measure_explanation": _EXPLANATIONS[report.measure],
        "percent": targets.percent(report.percent),
        "kappa": targets.fixed(report.kappa),
        "kappa_words": targets.kappa_words(report.kappa),
        "mean_score": targets.fixed(report.mean_score),
        "score_label": _SCORE_LABELS.get(report.measure, ""),
        "pairs": pairs,
        "charted": charted,
        "chart_height": 24 * len(charted) + 2,
        # With two reviewers this is their one pair again.
        "reviewers": reviewers if len(reviewers) > 2 else [],
        "split": _split(report.items, report.agreed, counts["disagreements"], counts["adjudicated"]),
        "open": counts["open"],
        "adjudicated": counts["adjudicated"],
    }
    return render(request, "annotate/agreement.html", context)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def disagreement_list(request: HttpRequest, slug: str) -> HttpResponse:
    """Items whose reviewers disagree: open ones (default) or all, each with every reviewer's target."""
    project = access.admin_project(request, slug)
    show = "all" if request.GET.get("show") == "all" else "open"
    items = Item.objects.filter(project=project, disagreement=True).select_related("adjudication__adjudicator")
    if show == "open":
        items = items.filter(adjudication__isnull=True)
    page = Paginator(items.order_by("id"), PER_PAGE).get_page(request.GET.get("page"))
    answers: dict[int, list[dict]] = {}
    for a in (Answer.objects.filter(item__in=[i.pk for i in page], kind=AnswerKind.TARGET)
              .select_related("reviewer").order_by("reviewer__username")):
        answers.setdefault(a.item_id, []).append(
            {"reviewer": a.reviewer.get_username(), "target": _describe(project, a.item_id, a.target, page)})
    rows = [{"item": i, "summary": _summary(i.inputs), "answers": answers.get(i.pk, []),
             "adjudication": getattr(i, "adjudication", None)} for i in page]
    context = {
        "project": project, "rows": rows, "page": page, "show": show,
        "compared": _compared(project) if not rows else None,  # only the empty state says it
        "open": adjudication.open_disagreements(project).count(),
        "ranking": (project.tool, project.mode) in agreement.RANKING,
    }
    template = "annotate/_disagreements.html" if request.htmx else "annotate/disagreements.html"
    return render(request, template, context)


@require_POST
@login_required
def adjudicate_all_distribution(request: HttpRequest, slug: str) -> HttpResponse:
    """Ranking projects: settle every open disagreement with its reviewers' distribution over the candidates."""
    project = access.admin_project(request, slug)
    try:
        done = adjudication.adjudicate_open_with_distribution(project, request.user)
    except ValueError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{done} item{'s' if done != 1 else ''} adjudicated with the reviewers' "
                                  f"distribution over the candidates.")
    return redirect("disagreement_list", slug=project.slug)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def adjudication_page(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """One item: every reviewer's target side by side to pick from, the distribution, and a target editor."""
    project = access.admin_project(request, slug)
    item = access.project_item(project, pk)
    return _workspace(request, project, item)


@require_POST
@login_required
@vary_on_headers("HX-Request")
def adjudicate(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Store the item's final target: a picked answer (`answer`), the distribution (`distribution`), or the
    editor's target."""
    project = access.admin_project(request, slug)
    item = access.project_item(project, pk)
    note = request.POST.get("note", "")
    try:
        if request.POST.get("answer"):
            answer = get_object_or_404(Answer, pk=_int(request.POST["answer"]), item=item)
            result = adjudication.adjudicate(item, request.user, answer=answer, note=note)
        elif request.POST.get("distribution"):
            result = adjudication.adjudicate(item, request.user, distribution=True, note=note)
        else:
            receipt = item.prediction.receipt if item.prediction else None
            target = parse_target(project.mode, request.POST, item.inputs, receipt)
            result = adjudication.adjudicate(item, request.user, target=target, note=note)
    except ValidationError as exc:
        return _refused(request, project, item, " ".join(exc.messages))
    except adjudication.InvalidTarget as exc:
        return _refused(request, project, item, f"The tool would not train on this target: {exc}")
    except ValueError as exc:  # NoDisagreement and requests that make no sense for this item
        return _refused(request, project, item, str(exc), status=409)
    unsent.forget_for_admin(item, request.user, "adjudication")
    messages.success(request, result.message)
    if request.htmx:
        return _workspace(request, project, item)
    return redirect("adjudication_page", slug=project.slug, pk=item.pk)


# -- responses and helpers -------------------------------------------------------------------------------------
def _refused(request, project: Project, item: Item, message: str, status: int = 400) -> HttpResponse:
    """Say why without replacing the editor, so what the admin wrote stays."""
    if request.htmx:
        response = render(request, "annotate/_editor_error.html", {"error": message}, status=200)
        response["HX-Retarget"] = "#adjudicate-error"
        response["HX-Reswap"] = "innerHTML"
        return response
    return _workspace(request, project, item, error=message, status=status)


def _workspace(request, project: Project, item: Item, *, error: str = "", status: int = 200) -> HttpResponse:
    current = Adjudication.objects.filter(item=item).select_related("adjudicator", "chosen_answer__reviewer").first()
    answers = list(Answer.objects.filter(item=item).select_related("reviewer").prefetch_related("revisions")
                   .order_by("reviewer__username", "id"))
    finals = [a for a in answers if a.kind == AnswerKind.TARGET]
    cards = [
        {"answer": a, "reviewer": a.reviewer.get_username(), "key": str(n + 1),
         "target": targets.describe(project.mode, item.inputs, a.target),
         "chosen": current is not None and current.chosen_answer_id == a.pk,
         "history": display.answer_history(a.revisions.all(), targets.liner(project.mode, item.inputs))}
        for n, a in enumerate(finals)
    ]
    others = [a for a in answers if a.kind != AnswerKind.TARGET]
    distribution = None
    if (project.tool, project.mode) in agreement.RANKING and len(finals) >= 2:
        try:
            values = adjudication.reviewer_distribution(item)
        except ValueError:
            values = None
        if values is not None:
            distribution = targets.describe(project.mode, item.inputs, values)
    receipt = item.prediction.receipt if item.prediction else None
    next_item = adjudication.open_disagreements(project).exclude(pk=item.pk).filter(pk__gt=item.pk).first() \
        or adjudication.open_disagreements(project).exclude(pk=item.pk).first()
    context = {
        "project": project,
        "item": item,
        "cards": cards,
        "others": others,
        "distribution": distribution,
        "current": current,
        "current_target": targets.describe(project.mode, item.inputs, current.target) if current else None,
        "revisions": list(current.revisions.select_related("adjudicator")) if current else [],
        "inputs": display.inputs_view(item.inputs, None),
        "editor": display.editor_view(project.mode, item.inputs, receipt, _draft(project, current, finals)),
        "can_adjudicate": item.disagreement or current is not None,
        "next_url": reverse("adjudication_page", args=[project.slug, next_item.pk]) if next_item else None,
        "list_url": reverse("disagreement_list", args=[project.slug]),
        "error": error,
        "oob": bool(request.htmx),
    }
    if context["can_adjudicate"]:  # what the admin writes is kept for their other browsers until they adjudicate
        context["typed_url"] = reverse("item_typed", args=[project.slug, item.pk])
        settled_at = current.updated_at if current else None
        context["server_typed"] = unsent.admin_copy(item, request.user, "adjudication", after=settled_at)
        context["draft_settled"] = unsent.settled_age(settled_at, timezone.now())
    template = "annotate/_adjudication.html" if request.htmx else "annotate/adjudication.html"
    return render(request, template, context, status=status)


def _draft(project: Project, current: Adjudication | None, finals: list[Answer]):
    """Where the editor starts: the adjudicated target; for text, the first reviewer's text to edit; else the
    model's answer, as on the item page."""
    if current is not None:
        return current.target
    if display.editor_name(project.mode) == "text" and finals:
        return finals[0].target
    return None


def _split(items: int, agreed: int, disagreements: int, adjudicated: int) -> list[dict]:
    """The stacked bar of compared items: agreed, disagreeing and open, disagreeing and adjudicated."""
    total = max(items, agreed + disagreements, 1)
    parts = [("agreed", "Agreed", agreed), ("open", "Disagree, open", disagreements - adjudicated),
             ("adjudicated", "Disagree, adjudicated", adjudicated)]
    out, x = [], 0.0
    for name, label, count in parts:
        width = 100.0 * count / total
        out.append({"name": name, "label": label, "count": count, "x": f"{x:.2f}", "width": f"{width:.2f}"})
        x += width
    return out


def _compared(project: Project) -> int:
    """Items with final targets from two or more reviewers."""
    return (Item.objects.filter(project=project)
            .annotate(targets=Count("answers", filter=Q(answers__kind=AnswerKind.TARGET)))
            .filter(targets__gte=2).count())


def _describe(project: Project, item_id: int, target, page) -> dict:
    inputs = next(i.inputs for i in page if i.pk == item_id)
    return targets.describe(project.mode, inputs, target)


def _summary(inputs) -> str:
    if isinstance(inputs, str):
        return inputs[:140]
    if isinstance(inputs, dict):
        for field in ("question", "goal", "premise", "text", "message", "prompt"):
            if isinstance(inputs.get(field), str):
                return inputs[field][:140]
        if isinstance(inputs.get("queries"), list) and inputs["queries"]:
            return str(inputs["queries"][0])[:140]
    return display.compact(inputs)[:140]


def _int(value: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"answer: expected an answer id, got {value!r}") from exc
