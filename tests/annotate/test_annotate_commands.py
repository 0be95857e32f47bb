"""Management commands: import_items, export_experience, create_api_token."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from annotate import queue, tooling
from annotate.models import ApiToken, Export, Item
from tensorcode import training

pytestmark = pytest.mark.django_db

GOOD = {"question": "q", "evidence": [{"source_id": "a", "text": "t"}],
        "hypotheses": [{"id": "x", "text": "one"}, {"id": "y", "text": "two"}]}


def _run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_import_items_imports_a_file(project, tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"inputs": GOOD}) + "\n" + json.dumps({"inputs": GOOD}) + "\n")

    output = _run("import_items", "outages", str(path), "--no-predict")

    assert "Imported 2 items into outages" in output
    assert Item.objects.count() == 2


def test_import_items_lists_errors_with_line_numbers(project, tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"inputs": GOOD}) + "\n{oops\n")
    err = io.StringIO()

    with pytest.raises(CommandError, match="nothing imported: 1 error"):
        call_command("import_items", "outages", str(path), stdout=io.StringIO(), stderr=err)

    assert f"{path}: line 2: not valid JSON" in err.getvalue()
    assert not Item.objects.exists()


def test_import_items_refuses_unknown_project_and_missing_file(project, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no project with slug 'nope'"):
        _run("import_items", "nope", str(tmp_path / "x.jsonl"))
    with pytest.raises(CommandError, match="cannot read"):
        _run("import_items", "outages", str(tmp_path / "missing.jsonl"))


def test_export_experience_writes_loadable_files(project, reviewer, ready_items, tmp_path: Path) -> None:
    items = ready_items(project, [0.1, 0.2, 0.3])
    for item in items:
        queue.claim_next(project, reviewer)
        queue.submit(item, reviewer, "dns")
    copy = tmp_path / "out"

    output = _run("export_experience", "outages", "--minibatch-size", "2", "--copy-to", str(copy))

    export = Export.objects.get()
    assert f"Export {export.pk}: 3 answers" in output
    names = sorted(p.name for p in copy.iterdir())
    assert names == ["answers.jsonl", f"export-{export.pk}.zip", "manifest.json", "part-00001.json",
                     "part-00002.json"]
    trainer = tooling.trainer_for(project.current_version)
    loaded = training.load_experience(copy / "part-00002.json", operations=trainer.operations)
    assert loaded.supervisions[0].source == (f"review:outages/{items[2].pk}/rita",)


def test_export_experience_with_nothing_selected_fails(project) -> None:
    with pytest.raises(CommandError, match="nothing to export"):
        _run("export_experience", "outages")


def test_export_experience_refuses_bad_filters(project) -> None:
    with pytest.raises(CommandError, match="not valid JSON"):
        _run("export_experience", "outages", "--filters", "{")


def test_create_api_token_prints_a_working_key(project, project_admin, client) -> None:
    key = _run("create_api_token", "ada", "--name", "ci").strip()

    assert ApiToken.objects.get().name == "ci"
    assert client.get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200


def test_create_api_token_limits_to_a_project_of_the_user(project, outsider) -> None:
    with pytest.raises(CommandError, match="not a member"):
        _run("create_api_token", "olga", "--project", "outages")
    with pytest.raises(CommandError, match="no user"):
        _run("create_api_token", "ghost")
    outsider.is_active = False
    outsider.save(update_fields=["is_active"])
    with pytest.raises(CommandError, match="olga's account is deactivated; reactivate it first"):
        _run("create_api_token", "olga")
    assert not ApiToken.objects.exists()


def test_register_model_version_stores_a_copy_and_can_make_it_current(project, tmp_path: Path) -> None:
    tool = tooling.create_tool("decision", "rank", {"dim": 8, "buckets": 64})
    tool.save_pretrained(tmp_path / "mine")

    output = _run("register_model_version", "outages", str(tmp_path / "mine"), "--label", "mine", "--make-current")

    project.refresh_from_db()
    version = project.current_version
    assert f"Model version {version.pk} (mine)" in output
    assert version.trained and version.is_materialized
    assert tooling.load_version(version).configuration() == tool.configuration()


def test_register_model_version_refuses_another_tool_and_bad_directories(project, tmp_path: Path) -> None:
    tooling.create_tool("chatbot", "reply", {}).save_pretrained(tmp_path / "bot")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "tool.json").write_text("{not json")

    with pytest.raises(CommandError, match="a 'chatbot' tool, but project 'outages' uses 'decision'"):
        _run("register_model_version", "outages", str(tmp_path / "bot"))
    with pytest.raises(CommandError):
        _run("register_model_version", "outages", str(tmp_path / "junk"))
    with pytest.raises(CommandError):
        _run("register_model_version", "outages", str(tmp_path / "missing"))
