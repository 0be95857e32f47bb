"""Seed the demo: a demo admin and reviewer, and one project per tool kind and mode with a briefly trained model.

Each project's model is trained for a few seconds on authored examples (`annotate.demo_data`), saved as the
project's first model version, and the project's review items (other examples of the same kind) are imported
and queued for prediction, so the predictions a newcomer sees are plausible and say which version made them.
Seeding is idempotent: a project that exists is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.db import transaction

from annotate import demo_data, imports, tooling
from annotate.models import Membership, ModelVersion, Project, Role

ADMIN = ("admin", "admin")
REVIEWER = ("reviewer", "reviewer")
TRAIN_EXAMPLES = 36
REVIEW_ITEMS = 30
# Generation learns more slowly than choosing among candidates.
EPOCHS = {"proposal": 150, "language": 100, "reply": 80}
DEFAULT_EPOCHS = 40
LEARNING_RATE = 0.01

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


def seed(log: Callable[[str], None] = print) -> list[Project]:
    """Ensure the demo users and projects exist; returns the projects created now."""
    admin = _ensure_user(*ADMIN, staff=True)
    reviewer = _ensure_user(*REVIEWER, staff=False)
    created = []
    for tool, mode in demo_data.pairs():
        slug = f"demo-{tool}-{mode}"
        if Project.objects.filter(slug=slug).exists():
            continue
        log(f"Creating {slug}: training a small {tool} model ({mode}) on {TRAIN_EXAMPLES} authored examples")
        created.append(_create_project(slug, tool, mode, admin, reviewer))
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
        project = Project.objects.create(
            slug=slug, name=f"Demo: {tool} ({mode})", tool=tool, mode=mode,
            guidelines=GUIDELINES.get((tool, mode), ""), configuration={}, created_by=admin,
        )
        Membership.objects.create(project=project, user=admin, role=Role.ADMIN)
        Membership.objects.create(project=project, user=reviewer, role=Role.REVIEWER)
        version = ModelVersion.objects.allocate(
            project, label=f"demo: trained briefly on {len(train)} authored examples", trained=True, metrics=metrics,
        )
        model.save_pretrained(version.path)
        project.current_version = version
        project.save(update_fields=["current_version"])
        imports.create_items(project, [tooling.to_json(inputs) for inputs, _ in review], predict=True)
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

