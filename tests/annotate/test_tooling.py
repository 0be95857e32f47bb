"""annotate.tooling for every tool and mode: inputs and targets checked, traced predictions, experience files."""

from __future__ import annotations

import json

import pytest

from annotate import tooling
from tensorcode import training

EVIDENCE = [{"source_id": "log:1", "text": "disk full on alpha"}, {"source_id": "log:2", "text": "beta is fine"}]
PIXELS = [[[0.9, 0.1, 0.5, 0.2]] * 4, [[0.1, 0.1, 0.3, 0.4]] * 4, [[0.1, 0.9, 0.2, 0.7]] * 4]
HYPOTHESES = [{"id": "a", "text": "alpha failed"}, {"id": "b", "text": "beta failed"}]
PLANS = [{"id": "p1", "text": "restart alpha"}, {"id": "p2", "text": "wait an hour"}]
SCENE_CANDIDATES = [{"id": "c", "text": "a red circle"}, {"id": "s", "text": "a blue square"}]

# (tool, mode): (inputs as JSON, a target training accepts, a target it rejects)
CASES = {
    ("decision", "rank"): ({"question": "which server failed?", "evidence": EVIDENCE, "hypotheses": HYPOTHESES},
                           "a", "zzz"),
    ("investigator", "rank"): ({"question": "which server failed?", "evidence": EVIDENCE,
                                "hypotheses": HYPOTHESES}, [0.3, 0.7], [0.9, 0.9]),
    ("investigator", "verification"): ({"premise": "the disk on alpha is full", "hypothesis": "alpha is full"},
                                       "entailment", "maybe"),
    ("investigator", "proposal"): ({"question": "which server failed?", "evidence": EVIDENCE}, "alpha failed", 42),
    ("investigator", "retrieval"): ({"queries": ["disk full"], "documents": ["alpha disk full", "beta is fine"]},
                                    [[True, False]], [[False, False]]),
    ("planner", "outcomes"): ({"goal": "restore service", "evidence": EVIDENCE, "plans": PLANS},
                              {"candidate_id": "p1", "outcome": 2.5}, {"candidate_id": "p9", "outcome": 1.0}),
    ("planner", "proposal"): ({"goal": "restore service", "evidence": EVIDENCE}, "restart alpha", None),
    ("scene", "rank"): ({"pixels": PIXELS, "source_id": "image:1", "question": "what is shown?",
                         "candidates": SCENE_CANDIDATES}, "s", "x"),
    ("scene", "language"): ({"pixels": PIXELS, "source_id": "image:1", "question": "what is shown?"},
                            "a red circle", ["not", "text"]),
    ("chatbot", "reply"): ("hello there", "hi, how can I help?", 7),
}


def test_every_registered_tool_and_mode_has_a_case() -> None:
    assert {(t, m) for t, modes in tooling.TOOL_MODES.items() for m in modes} == set(CASES)


@pytest.mark.parametrize(("tool", "mode"), sorted(CASES))
def test_validate_target_accepts_good_and_rejects_bad(tool: str, mode: str) -> None:
    inputs, good, bad = CASES[(tool, mode)]

    assert tooling.validate_inputs(tool, mode, inputs) is not None
    tooling.validate_target(tool, mode, inputs, good)
    with pytest.raises(ValueError):
        tooling.validate_target(tool, mode, inputs, bad)


@pytest.mark.parametrize(("tool", "mode"), sorted(CASES))
def test_prediction_and_experience_round_trip(tool: str, mode: str, tmp_path) -> None:
    inputs, good, _ = CASES[(tool, mode)]
    tool_object = tooling.create_tool(tool, mode, {})
    tool_object.save_pretrained(tmp_path / "model")

    class Version:  # what predict_batch and trainer_for read of a ModelVersion row
        pk, trained, is_materialized, path = 1, False, True, tmp_path / "model"

    Version.tool, Version.mode = tool, mode

    (result,) = tooling.predict_batch(Version, [inputs])

    json.dumps(result, allow_nan=False)
    assert result["confidence"] is None or 0.0 <= result["confidence"] <= 1.0
    assert result["trace"]["operations"][0]["status"] == "ok"
    trainer = tooling.trainer_for(Version)
    target = tooling.validate_target(tool, mode, inputs, good)
    tooling.capture_experience(trainer, mode, [inputs, inputs], [target, target], ["review:p/1/r", "review:p/2/r"],
                               tmp_path / "part.json")
    loaded = training.load_experience(tmp_path / "part.json", operations=trainer.operations)
    assert [s for record in loaded.supervisions for s in record.source] == ["review:p/1/r", "review:p/2/r"]


def test_a_generated_nul_is_stored_as_the_replacement_character(tmp_path, monkeypatch) -> None:
    """An untrained generating model can emit byte 0; PostgreSQL cannot store it, so the prediction shows it as
    U+FFFD, as undecodable bytes are shown, instead of failing the whole batch."""
    inputs = CASES[("chatbot", "reply")][0]
    tooling.create_tool("chatbot", "reply", {}).save_pretrained(tmp_path / "model")

    class Version:
        pk, trained, is_materialized, path, tool, mode = 1, False, True, tmp_path / "model", "chatbot", "reply"

    real = tooling._predict
    monkeypatch.setattr(tooling, "_predict", lambda *args: [{**r, "text": "a\x00b"} for r in real(*args)])

    (result,) = tooling.predict_batch(Version, [inputs])

    assert result["receipt"]["text"] == "a\ufffdb"


@pytest.mark.parametrize(("tool", "mode"), [("chatbot", "reply"), ("decision", "rank")])
def test_only_the_tools_own_call_is_shown_with_the_items_inputs_and_receipt(tool: str, mode: str, tmp_path) -> None:
    """A generating tool runs its modules as top-level calls of their own: each shows its own output (a tensor),
    not the item's receipt, which made every row of "How the model got here" look the same."""
    inputs = CASES[(tool, mode)][0]
    tool_object = tooling.create_tool(tool, mode, {})
    tool_object.save_pretrained(tmp_path / "model")

    class Version:
        pk, trained, is_materialized, path = 1, False, True, tmp_path / "model"

    Version.tool, Version.mode = tool, mode

    (result,) = tooling.predict_batch(Version, [inputs])

    top = [op for op in result["trace"]["operations"] if op["kind"] != "module"]
    receipt, given = tooling.describe_value(result["receipt"]), tooling.describe_value(inputs)
    own = [op for op in top if op["type"].lower() == tool]  # Decision's call is traced; Chatbot's modules only
    assert len(own) == (1 if tool == "decision" else 0) and top
    assert all(op["outputs"] == [receipt] and op["inputs"] == [given] for op in own)
    assert all(op["outputs"] != [receipt] and op["inputs"] != [given] for op in top if op not in own)


def test_describe_value_summarizes_without_copying_large_values() -> None:
    described = tooling.describe_value("x" * 10_000)

    assert described["length"] == 10_000 and len(described["preview"]) == tooling.MAX_PREVIEW


def test_to_json_refuses_a_nul_character_naming_its_path() -> None:
    """Every imported input and stored target passes here; PostgreSQL cannot store a NUL in JSON text."""
    for value, where in (("a\x00", "the value"), ({"q": ["ok", {"t": "\x00"}]}, "q[1].t"),
                         ({"k\x00": 1}, "k\\u0000"), ([["x", "y\x00"]], "[0][1]")):
        with pytest.raises(ValueError) as caught:
            tooling.to_json(value)
        assert str(caught.value) == f"{where}: contains a NUL character (\\u0000), which cannot be stored"
    assert tooling.to_json({"q": "\\u0000", "t": ("a", 1)}) == {"q": "\\u0000", "t": ["a", 1]}
    assert tooling.to_json({"k\x00": ["a\x00"]}, nul="?") == {"k?": ["a?"]}


def test_check_tool_mode_names_valid_choices() -> None:
    with pytest.raises(ValueError, match="registered tools: chatbot, decision"):
        tooling.check_tool_mode("oracle", "rank")
    with pytest.raises(ValueError, match="its modes: outcomes, proposal"):
        tooling.check_tool_mode("planner", "rank")


def test_web_process_checks_inputs_and_targets_without_torch() -> None:
    """The site's modules and the target check never import torch: web requests never run a model."""
    import subprocess
    import sys

    from django.conf import settings

    script = (
        "import os, sys, django; os.environ['DJANGO_SETTINGS_MODULE'] = 'annotate.settings'; django.setup()\n"
        "from django.urls import resolve; resolve('/')\n"
        "from annotate import admin, api, export, imports, queue, tasks, tooling\n"
        f"inputs = {CASES[('decision', 'rank')][0]!r}\n"
        "tooling.validate_inputs('decision', 'rank', inputs)\n"
        "tooling.validate_target('decision', 'rank', inputs, 'a')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=settings.BASE_DIR, capture_output=True, text=True,
                          timeout=120)

    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("environment", "threads"), [({}, 1), ({"OMP_NUM_THREADS": "2"}, 2)])
def test_a_worker_process_runs_torch_on_one_thread_unless_told_otherwise(environment, threads) -> None:
    """Settings load before any task imports torch, so torch starts with OMP_NUM_THREADS threads, 1 by default."""
    import os
    import subprocess
    import sys

    from django.conf import settings

    script = ("import os, django; os.environ['DJANGO_SETTINGS_MODULE'] = 'annotate.settings'; django.setup()\n"
              "from annotate import tasks\n"
              "import torch; print(torch.get_num_threads())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", script], cwd=settings.BASE_DIR, capture_output=True, text=True,
                          timeout=120, env={**env, **environment})

    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) == threads


def test_readme_import_examples_are_valid_inputs() -> None:
    """Every example line of README's import formats table passes its tool's input check."""
    import re

    from django.conf import settings

    readme = (settings.BASE_DIR / "README.md").read_text()
    section = readme[readme.index("### Import formats"):readme.index("### Exports")]
    rows = re.findall(r"^\| ([a-z, ]+) / ([a-z]+) \| `(.*)` \|$", section, re.MULTILINE)
    checked = set()
    for tools, mode, line in rows:
        for tool in (name.strip() for name in tools.split(",")):
            tooling.validate_inputs(tool, mode, json.loads(line)["inputs"])
            checked.add((tool, mode))
    assert checked == set(CASES)


def test_an_export_trainer_captures_without_building_an_optimizer(project) -> None:
    """Exports capture with a trainer that cannot train (its optimizer would cost an export ~80 MB)."""
    trainer = tooling.trainer_for_project(project)

    assert isinstance(trainer, training.Trainer)
    with pytest.raises(RuntimeError, match="never updates weights"):
        trainer.optimizer.step()
