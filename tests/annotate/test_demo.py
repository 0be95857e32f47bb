"""`manage.py demo --no-serve`: demo users and one project per tool kind and mode, safe to run twice."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from annotate import demo, demo_data
from annotate.models import Item, Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def quick_demo(monkeypatch, settings):
    """The seeding path with a fraction of the training, so the test checks wiring rather than learning."""
    settings.DEBUG = True
    monkeypatch.setattr(demo, "TRAIN_EXAMPLES", 4)
    monkeypatch.setattr(demo, "REVIEW_ITEMS", 3)
    monkeypatch.setattr(demo, "EPOCHS", {})
    monkeypatch.setattr(demo, "DEFAULT_EPOCHS", 1)


def test_demo_creates_a_project_per_tool_mode_with_a_trained_version(quick_demo) -> None:
    call_command("demo", "--no-serve")

    projects = Project.objects.order_by("slug")
    assert sorted((p.tool, p.mode) for p in projects) == demo_data.pairs()
    for project in projects:
        version = project.current_version
        assert version is not None and version.trained
        assert json.loads((version.path / "tool.json").read_text())["configuration"] is not None
        assert project.items.count() == 3
        assert project.role_of(project.created_by) == "admin"
        assert {m.user.username for m in project.memberships.all()} == {"admin", "reviewer"}


def test_demo_twice_adds_nothing(quick_demo) -> None:
    call_command("demo", "--no-serve")
    counts = (Project.objects.count(), Item.objects.count())

    call_command("demo", "--no-serve")

    assert (Project.objects.count(), Item.objects.count()) == counts


@pytest.mark.parametrize(("tool", "mode"), demo_data.pairs())
def test_demo_data_is_valid_input_and_target_for_its_tool(tool: str, mode: str) -> None:
    from annotate import tooling

    for inputs, target in demo_data.examples(tool, mode, 12):
        tooling.validate_target(tool, mode, tooling.validate_inputs(tool, mode, inputs), target)
