"""Seed the demo: a demo admin and reviewer, and one project per tool kind and mode with a briefly trained model.

Each project's model is trained for a few seconds on authored examples (`annotate.demo_data`), saved as the
project's first model version, and the project's review items (other examples of the same kind) are imported
and queued for prediction, so the predictions a newcomer sees are plausible and say which version made them.

One more project, `demo-agreement`, gives each item to two reviewers (overlap 2). Two demo reviewers, alice and
bob, have already answered it through the review queue (`annotate.queue`: claim, then submit, as the item page
does), agreeing on most items and not on a few, so its agreement, disagreements and adjudication pages have
something to show; a few items still wait for a second reviewer.

Seeding is idempotent: a project that exists is left as it is, and one an admin deleted stays deleted
(`DemoSeed` remembers what was created) unless asked to recreate it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.db import transaction

from annotate import agreement, demo_data, imports, queue, tasks, tooling
from annotate.models import DemoSeed, Membership, ModelVersion, Project, Role

ADMIN = ("admin", "admin")
REVIEWER = ("reviewer", "reviewer")
TEAM = (("alice", "alice"), ("bob", "bob"))  # the agreement project's reviewers
TRAIN_EXAMPLES = 36
REVIEW_ITEMS = 30
# Generation learns more slowly than choosing among candidates.
EPOCHS = {"proposal": 150, "language": 100, "reply": 80}
DEFAULT_EPOCHS = 40
LEARNING_RATE = 0.01

AGREEMENT_SLUG = "demo-agreement"
AGREEMENT_KIND = ("decision", "rank")  # categorical: percent agreement and kappa; ranking: the distribution too
AGREEMENT_ITEMS = 12  # alice answers all of them, bob the first AGREEMENT_COMPARED he is given
AGREEMENT_COMPARED = 10
AGREEMENT_BOB_DIFFERS = (2, 5, 8)  # bob's answers (0-based, in his queue order) that choose another candidate

GUIDELINES = {
    ("investigator", "rank"): "Pick the hypothesis the evidence supports (keys 1-9). If two fit, split the weight.",
    ("investigator", "verification"): "Does the premise entail the hypothesis (e), contradict it (c), or neither (n)?",
    ("investigator", "proposal"): "Write the one-sentence cause the evidence points to.",
    ("investigator", "retrieval"): "Tick every document that is evidence for the query; at least one per query.",
    ("decision", "rank"): "Pick the explanation the evidence supports (keys 1-9).",
    ("planner", "outcomes"): "Enter how well each plan would work, 0 (useless) to 10 (fixes it).",
    ("planner", "proposal"): "Write the plan you would follow to restore the service.",
    ("scene", "rank"): "Pick the description of the shape in the picture (keys 1-9).",
    ("scene", "language"): "Describe the shape as 'a <colour> <shape>', e.g. 'a red circle'.",
    ("chatbot", "reply"): "Write the reply the bot should have given: short and friendly.",
}


def seed(log: Callable[[str], None] = print, *, recreate: bool = False) -> list[Project]:
    """Ensure the demo users and projects exist; returns the projects created now.

    A demo project created once and deleted since stays deleted (an admin tidied up), unless `recreate`.
    """
    admin = _ensure_user(*ADMIN, staff=True)
    reviewer = _ensure_user(*REVIEWER, staff=False)
    team = [_ensure_user(*user, staff=False) for user in TEAM]
    seeded = set(DemoSeed.objects.values_list("slug", flat=True))
    existing = set(Project.objects.filter(slug__startswith="demo-").values_list("slug", flat=True))
    created, deleted = [], []

    def wanted(slug: str) -> bool:
        if slug in seeded and slug not in existing and not recreate:
            deleted.append(slug)
        return slug not in existing and (recreate or slug not in seeded)

    for tool, mode in demo_data.pairs():
        slug = f"demo-{tool}-{mode}"
        if wanted(slug):
            log(f"Creating {slug}: training a small {tool} model ({mode}) on {TRAIN_EXAMPLES} authored examples")
            created.append(_create_project(slug, tool, mode, admin, reviewer))
    if wanted(AGREEMENT_SLUG):
        names = " and ".join(username for username, _ in TEAM)
        log(f"Creating {AGREEMENT_SLUG}: overlap 2, {AGREEMENT_ITEMS} items answered by {names} through the queue")
        created.append(_create_agreement_project(admin, reviewer, team))
    if deleted:
        log(f"Not creating {', '.join(deleted)} again: deleted since the demo created "
            f"{'it' if len(deleted) == 1 else 'them'} (python manage.py demo --recreate brings "
            f"{'it' if len(deleted) == 1 else 'them'} back).")
    return created


def _ensure_user(username: str, password: str, *, staff: bool):
    user, made = get_user_model().objects.get_or_create(username=username)
    if made or user.is_staff != staff:
        user.is_staff = user.is_superuser = staff
        user.set_password(password)
        user.save()
    return user


def _create_project(slug: str, tool: str, mode: str, admin, reviewer) -> Project:
    examples = demo_data.examples(tool, mode, TRAIN_EXAMPLES + REVIEW_ITEMS)
    train, review = examples[:TRAIN_EXAMPLES], examples[TRAIN_EXAMPLES:]
    model, metrics = _train(tool, mode, train, slug)
    with transaction.atomic():
        project = _new_project(slug, f"Demo: {tool} ({mode})", tool, mode, GUIDELINES.get((tool, mode), ""),
                               admin, [reviewer], model, metrics, _trained_label(len(train)))
        imports.create_items(project, [tooling.to_json(inputs) for inputs, _ in review], predict=True)
    return project


def _create_agreement_project(admin, reviewer, team: list) -> Project:
    """The overlap-2 project, with the demo reviewer and `team` (alice and bob) as reviewers; the team answers."""
    tool, mode = AGREEMENT_KIND
    # Another seed than demo-decision-rank's, so its items are not that project's items again.
    examples = demo_data.examples(tool, mode, TRAIN_EXAMPLES + AGREEMENT_ITEMS, seed=1)
    train, review = examples[:TRAIN_EXAMPLES], examples[TRAIN_EXAMPLES:]
    model, metrics, label = _model_for_agreement(tool, mode, train)
    guidelines = "Two reviewers label each item. " + GUIDELINES[AGREEMENT_KIND]
    with transaction.atomic():
        project = _new_project(AGREEMENT_SLUG, f"Demo: agreement ({tool}, {mode})", tool, mode, guidelines, admin,
                               [reviewer, *team], model, metrics, label, overlap=2)
        ids = imports.create_items(project, [tooling.to_json(inputs) for inputs, _ in review], predict=False).item_ids
        # Predicted here rather than by the worker: the queue offers only predicted items, and alice and bob
        # answer before the worker starts.
        tasks.predict_items(project.pk, ids)
        right = dict(zip(ids, (target for _, target in review), strict=True))
        alice, bob = team
        _answer(project, alice, right, AGREEMENT_ITEMS)
        _answer(project, bob, right, AGREEMENT_COMPARED, differ=AGREEMENT_BOB_DIFFERS)
    return project


def _model_for_agreement(tool: str, mode: str, train: list):
    """`(model, metrics, label)`: the model demo-<tool>-<mode> was seeded with, when that project still has it;
    else one trained now. Training was most of this project's seeding time, and the same kind of model trained on
    the same kind of examples predicts as plausibly."""
    slug = f"demo-{tool}-{mode}"
    seeded = ModelVersion.objects.filter(project__slug=slug, trained=True, created_by_job=None).order_by("id").first()
    if seeded is not None and (seeded.path / "tool.json").exists():
        return seeded.load(), dict(seeded.metrics), f"demo: {slug}'s model ({seeded.label.removeprefix('demo: ')})"
    model, metrics = _train(tool, mode, train, AGREEMENT_SLUG)
    return model, metrics, _trained_label(len(train))


def _trained_label(examples: int) -> str:
    return f"demo: trained briefly on {examples} authored examples"


def _answer(project: Project, user, right: dict, count: int, differ: tuple[int, ...] = ()) -> None:
    """`user` claims and submits `count` items as a reviewer does: the right candidate, or for the answers
    numbered in `differ` another one, so the item's `disagreement` and the answers' provenance are the queue's."""
    for number in range(count):
        item = queue.claim_next(project, user)
        if item is None:
            raise RuntimeError(f"{project.slug}: the queue gave {user} nothing to answer; were its items predicted?")
        target = right[item.pk]
        if number in differ:
            target = next(c for c in agreement.candidate_ids(item.inputs) if c != target)
        queue.submit(item, user, target)


def _new_project(slug: str, name: str, tool: str, mode: str, guidelines: str, admin, reviewers: list, model,
                 metrics: dict, label: str, *, overlap: int = 1) -> Project:
    """The project, its members and its first model version (`model`, saved); call inside a transaction."""
    project = Project.objects.create(slug=slug, name=name, tool=tool, mode=mode, guidelines=guidelines,
                                     configuration={}, overlap=overlap, created_by=admin)
    Membership.objects.create(project=project, user=admin, role=Role.ADMIN)
    for user in reviewers:
        Membership.objects.create(project=project, user=user, role=Role.REVIEWER)
    version = ModelVersion.objects.allocate(project, label=label, trained=True, metrics=metrics)
    model.save_pretrained(version.path)
    project.current_version = version
    project.save(update_fields=["current_version"])
    DemoSeed.objects.get_or_create(slug=slug)
    return project


def _train(tool: str, mode: str, train: list, slug: str):
    """A fresh tool trained in-process on `train`; returns it (eval mode) and its training metrics."""
    import torch

    from tensorcode import training

    torch.set_num_threads(1)
    model = tooling.create_tool(tool, mode, {})
    trainer = training.Trainer.from_tool(model, optimizer=lambda params: torch.optim.Adam(params, lr=LEARNING_RATE))
    sources = [f"demo:{slug}/{index}" for index in range(len(train))]
    envelope = {"mode": mode, "inputs": [inputs for inputs, _ in train]}
    experience = trainer.capture(envelope, [target for _, target in train], source=sources)
    losses = trainer.fit([experience], epochs=EPOCHS.get(mode, DEFAULT_EPOCHS))
    report = training.evaluate(model, [experience])
    model.eval()
    metrics = {"train_loss_first": losses[0], "train_loss_last": losses[-1]}
    metrics[f"train_{report['metric']}"] = report["value"]
    return model, metrics

