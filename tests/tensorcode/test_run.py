"""``training.run``: the resumable training run, and ``training.evaluate``."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tensorcode import training
from tensorcode.tools.chatbot import Chatbot
from tensorcode.tools.decision import Decision

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
SERVICES = ["database", "cache", "queue", "gateway", "scheduler", "storage"]


def _incident(rng: random.Random) -> tuple[dict, str]:
    services = rng.sample(SERVICES, 3)
    asked = rng.randrange(3)
    evidence = [{"source_id": f"log-{i}", "text": f"event {i} hit the {s}"} for i, s in enumerate(services)]
    hypotheses = [{"id": f"h{i}", "text": f"the {s}"} for i, s in enumerate(services)]
    return {"question": f"what did event {asked} hit?", "evidence": evidence, "hypotheses": hypotheses}, f"h{asked}"


def write_experiences(directory: Path, count: int, *, dim: int = 16, seed: int = 0, size: int = 4) -> list[Path]:
    """``count`` experience files of ``size`` Decision reviews each."""
    rng = random.Random(seed)
    trainer = training.Trainer.from_tool(Decision(dim=dim))
    paths = []
    for i in range(count):
        data = [_incident(rng) for _ in range(size)]
        session = trainer.capture([x for x, _ in data], [y for _, y in data], source=f"review:{seed}/{i}")
        paths.append(directory / f"experience-{i}.json")
        session.save(paths[-1], operations=trainer.operations, release=True)
    return paths


@pytest.fixture(scope="module")
def experiences(tmp_path_factory) -> list[Path]:
    return write_experiences(tmp_path_factory.mktemp("experiences"), 6)


def state(tool: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in tool.state_dict().items()}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def files(directory: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# -- training --------------------------------------------------------------------------------------------------
def test_run_equals_the_hand_written_loop(experiences):
    """Without shuffling, a run is exactly Trainer.step over the files in order, epoch after epoch."""
    tool, reference = Decision(dim=16), Decision(dim=16)
    result = training.run(tool, experiences, epochs=2, shuffle=False, optimizer="adam", lr=0.01, device="cpu")
    trainer = training.Trainer.from_tool(reference, optimizer=lambda ps: torch.optim.Adam(ps, lr=0.01))
    sessions = [training.load_experience(p, operations=trainer.operations) for p in experiences]
    losses = [trainer.step(s) for _ in range(2) for s in sessions]
    assert result.losses == losses
    assert result.steps == result.total == 12 and result.completed
    assert same(state(tool), state(reference))


def test_shuffled_order_depends_on_seed_and_epoch(experiences):
    a = training.run(Decision(dim=16), experiences, epochs=2, seed=1, lr=0.05, device="cpu")
    b = training.run(Decision(dim=16), experiences, epochs=2, seed=1, lr=0.05, device="cpu")
    c = training.run(Decision(dim=16), experiences, epochs=2, seed=2, lr=0.05, device="cpu")
    assert a.losses == b.losses
    assert a.losses != c.losses


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_stopped_and_resumed_run_is_bit_identical(tmp_path, experiences, optimizer):
    settings = {"epochs": 3, "interval": 4, "optimizer": optimizer, "lr": 0.02, "device": "cpu", "seed": 5}
    whole = Decision(dim=16)
    expected = training.run(whole, experiences, checkpoint_dir=tmp_path / "whole", **settings)

    first = Decision(dim=16)
    stopped = training.run(
        first, experiences, checkpoint_dir=tmp_path / "part", callback=lambda r: r.step == 7, **settings
    )
    assert not stopped.completed and stopped.steps == 7
    assert json.loads((tmp_path / "part" / "training.json").read_text())["progress"]["run"]["step"] == 7

    resumed_tool = Decision(dim=16)  # a fresh process would rebuild the tool from its initial weights
    reports = []
    resumed = training.run(resumed_tool, experiences, checkpoint_dir=tmp_path / "part", callback=reports.append,
                           **settings)
    assert resumed.completed and resumed.resumed_from == 7
    assert resumed.losses == expected.losses
    assert [r.step for r in reports] == list(range(8, 19))
    assert same(state(resumed_tool), state(whole))


def test_completed_run_rerun_changes_nothing(tmp_path, experiences):
    tool = Decision(dim=16)
    first = training.run(tool, experiences, epochs=1, checkpoint_dir=tmp_path, interval=2, device="cpu")
    before = files(tmp_path)
    again = training.run(Decision(dim=16), experiences, epochs=1, checkpoint_dir=tmp_path, interval=2, device="cpu")
    assert again.losses == first.losses and again.completed and again.resumed_from == first.steps
    assert files(tmp_path) == before


def test_more_epochs_extend_a_finished_run(tmp_path, experiences):
    whole = Decision(dim=16)
    expected = training.run(whole, experiences, epochs=3, checkpoint_dir=tmp_path / "a", device="cpu")
    extended = Decision(dim=16)
    training.run(extended, experiences, epochs=1, checkpoint_dir=tmp_path / "b", device="cpu")
    result = training.run(extended, experiences, epochs=3, checkpoint_dir=tmp_path / "b", device="cpu")
    assert result.losses == expected.losses
    assert same(state(extended), state(whole))


def test_checkpoints_every_interval_and_at_the_end(tmp_path, experiences):
    reports = []
    training.run(Decision(dim=16), experiences, epochs=2, checkpoint_dir=tmp_path, interval=5, device="cpu",
                 callback=reports.append)
    assert [r["step"] for r in reports if r["checkpointed"]] == [5, 10, 12]
    progress = json.loads((tmp_path / "training.json").read_text())["progress"]["run"]
    assert (progress["step"], progress["epoch"], progress["position"], progress["seed"]) == (12, 2, 0, 0)
    assert len(progress["losses"]) == 12
    last = reports[-1].to_dict()
    assert {k: last[k] for k in ("step", "total", "epoch", "epochs", "position", "experiences")} == {
        "step": 12, "total": 12, "epoch": 2, "epochs": 2, "position": 6, "experiences": 6,
    }
    assert last["eta_seconds"] == 0.0 and isinstance(last["loss"], float)


def test_modes_and_global_random_state_are_restored(experiences):
    tool = Decision(dim=16)
    tool.eval()
    tool.ranker.train()  # an unusual mix, to see it come back as it was
    modes = {name: m.training for name, m in tool.named_modules()}
    torch.manual_seed(123)
    random.seed(123)
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    training.run(tool, experiences, epochs=1, device="cpu")
    assert {name: m.training for name, m in tool.named_modules()} == modes
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == python_state


def test_modes_are_restored_when_a_step_fails(experiences):
    tool = Decision(dim=16)
    tool.eval()

    def explode(report):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        training.run(tool, experiences, epochs=1, device="cpu", callback=explode)
    assert not any(m.training for m in tool.modules())


def test_run_trains_an_operations_trainer(tmp_path):
    """``trainer=`` runs a program bound with Trainer.from_ops (its optimizer, its modes)."""
    import tensorcode

    torch.manual_seed(0)
    head = torch.nn.Linear(4, 3)
    trainer = training.Trainer.from_ops({"head": head}, lr=0.1)
    sessions = []
    for i in range(3):
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(i))
        with tensorcode.trace() as session:
            logits = head(x)
        session.supervise(logits, torch.tensor([0, 1, 2, 0, 1]), source=f"batch:{i}")
        sessions.append(session)
    result = training.run(trainer=trainer, experiences=sessions, epochs=4, checkpoint_dir=tmp_path, interval=5)
    assert result.steps == 12 and result.losses[-1] < result.losses[0]
    assert trainer.steps == 12


# -- refusals: one line, nothing written -----------------------------------------------------------------------
def _refused(call, match: str, directory: Path) -> None:
    before = files(directory)
    with pytest.raises(training.RunError, match=match) as info:
        call()
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)
    assert files(directory) == before


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"interval": 0}, "^interval: expected a positive integer"),
        ({"epochs": 0}, "^epochs: expected a positive integer"),
        ({"optimizer": "rmsprop"}, "^optimizer: unknown optimizer 'rmsprop'; choose one of sgd, adam, adamw"),
        ({"lr": float("nan")}, "^lr: expected a positive finite"),
        ({"device": "tpu"}, "^device: unknown device 'tpu'"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, experiences, bad, match):
    checkpoint = tmp_path / "checkpoint"
    _refused(lambda: training.run(Decision(dim=16), experiences, checkpoint_dir=checkpoint, **bad), match,
             tmp_path)
    assert not checkpoint.exists()


def test_experience_of_another_tool_is_refused(tmp_path, experiences):
    bot = Chatbot(dim=8)
    trainer = training.Trainer.from_tool(bot)
    trainer.capture("hi", "hello", source="review:1").save(tmp_path / "chat.json", operations=trainer.operations)
    _refused(
        lambda: training.run(Decision(dim=16), [experiences[0], tmp_path / "chat.json"], checkpoint_dir=tmp_path / "c"),
        "chat.json: missing binding 'chatbot'",
        tmp_path,
    )


def test_checkpoint_of_another_configuration_is_refused(tmp_path, experiences):
    other = write_experiences(tmp_path, 2, dim=8)
    checkpoint = tmp_path / "checkpoint"
    training.run(Decision(dim=8), other, checkpoint_dir=checkpoint, device="cpu")
    tool = Decision(dim=16)
    before = state(tool)
    _refused(
        lambda: training.run(tool, experiences, checkpoint_dir=checkpoint, device="cpu"),
        "holds a checkpoint of another tool or configuration: operation 'decision' has another configuration",
        checkpoint,
    )
    assert same(state(tool), before)


def test_checkpoint_of_other_settings_is_refused(tmp_path, experiences):
    training.run(Decision(dim=16), experiences, checkpoint_dir=tmp_path, seed=1, device="cpu")
    _refused(lambda: training.run(Decision(dim=16), experiences, checkpoint_dir=tmp_path, seed=2, device="cpu"),
             "holds a run with seed=1, not 2; re-run with the same settings", tmp_path)
    _refused(lambda: training.run(Decision(dim=16), experiences[:3], checkpoint_dir=tmp_path, seed=1, device="cpu"),
             "holds a run with experiences=6, not 3", tmp_path)


def test_plain_trainer_checkpoint_is_not_resumed(tmp_path, experiences):
    tool = Decision(dim=16)
    training.Trainer.from_tool(tool).save_checkpoint(tmp_path)
    _refused(lambda: training.run(Decision(dim=16), experiences, checkpoint_dir=tmp_path, device="cpu"),
             "training.run did not write", tmp_path)



@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("[" + "[]," * 150_000 + "[]]", "cannot read checkpoint JSON: it holds 150,002 arrays and objects"),
        ("[" * 50_000 + "]" * 50_000, "cannot read checkpoint JSON: nested too deeply"),
        ('{"operations": NaN}', "non-standard JSON constant NaN"),
        ("[]", "a checkpoint is a JSON object"),
    ],
)
def test_hostile_run_manifest_is_refused_by_the_hardened_reader(tmp_path, experiences, content, match):
    """Resume reads ``training.json`` as untrusted, like ``load_checkpoint``: counted, strict, one line."""
    (tmp_path / "training.json").write_text(content)
    _refused(lambda: training.run(Decision(dim=16), experiences, checkpoint_dir=tmp_path, device="cpu"),
             f"^checkpoint_dir: .*training.json: .*{match}", tmp_path)


def test_linked_run_manifest_is_not_followed(tmp_path, experiences):
    checkpoint = tmp_path / "checkpoint"
    training.run(Decision(dim=16), experiences, epochs=1, checkpoint_dir=tmp_path / "real", device="cpu")
    checkpoint.mkdir()
    (checkpoint / "training.json").symlink_to(tmp_path / "real" / "training.json")
    _refused(lambda: training.run(Decision(dim=16), experiences, checkpoint_dir=checkpoint, device="cpu"),
             "training.json: cannot read checkpoint: it is a symbolic link", checkpoint)


# -- kill -9 ---------------------------------------------------------------------------------------------------
_WORKER = textwrap.dedent(
    """
    import sys, threading, torch
    from safetensors.torch import save_file
    from tensorcode import training
    from tensorcode.tools.decision import Decision
    torch.set_num_threads(1)
    checkpoint, out, slow, *paths = sys.argv[1:]
    tool = Decision(dim=16)
    # "slow": freeze for good after step 9 (past the checkpoint at step 6), so the parent's kill lands mid-run
    pause = (lambda report: report["step"] >= 9 and threading.Event().wait()) if slow == "slow" else None
    training.run(tool, paths, epochs=4, checkpoint_dir=checkpoint, interval=3, optimizer="adam", lr=0.01,
                 device="cpu", seed=7, callback=pause)
    save_file({k: v.contiguous() for k, v in tool.state_dict().items()}, out)
    """
)


def _worker(tmp_path: Path, checkpoint: str, out: str, slow: str, experiences) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(tmp_path / checkpoint), str(tmp_path / out), slow, *map(str, experiences)],
        env=env,
    )


def test_run_killed_with_sigkill_resumes_bit_identically(tmp_path, experiences, wait_until):
    whole = _worker(tmp_path, "whole", "whole.safetensors", "fast", experiences)
    victim = _worker(tmp_path, "part", "part.safetensors", "slow", experiences)
    manifest = tmp_path / "part" / "training.json"

    def checkpointed() -> bool:  # kill it once a checkpoint exists, mid-run
        assert victim.poll() is None, "the run ended before it could be killed"
        return manifest.is_file() and json.loads(manifest.read_text())["progress"]["run"]["step"] >= 6

    wait_until(checkpointed, timeout=120, what="the run's checkpoint at step 6")
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=60) == -signal.SIGKILL
    assert not (tmp_path / "part.safetensors").exists()
    step = json.loads(manifest.read_text())["progress"]["run"]["step"]
    assert 6 <= step < 24

    assert _worker(tmp_path, "part", "part.safetensors", "fast", experiences).wait(timeout=120) == 0
    assert whole.wait(timeout=120) == 0
    assert same(load_file(tmp_path / "part.safetensors"), load_file(tmp_path / "whole.safetensors"))
    resumed = json.loads(manifest.read_text())["progress"]["run"]["losses"]
    assert resumed == json.loads((tmp_path / "whole" / "training.json").read_text())["progress"]["run"]["losses"]


# -- evaluation ------------------------------------------------------------------------------------------------
def test_evaluate_reports_top1_and_loss_and_changes_nothing(tmp_path, experiences):
    tool = Decision(dim=16)
    tool.train()
    before, modes = state(tool), {n: m.training for n, m in tool.named_modules()}
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    report = training.evaluate(tool, experiences)
    assert report["metric"] == "top1" and report["examples"] == 24
    assert 0.0 <= report["value"] <= 1.0 and report["loss"] > 0
    assert same(state(tool), before) and {n: m.training for n, m in tool.named_modules()} == modes
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == python_state


def test_evaluate_top1_agrees_with_the_receipts(experiences):
    tool = Decision(dim=16)
    training.run(tool, experiences[:4], epochs=5, lr=0.05, optimizer="adam", device="cpu")
    rng = random.Random(0)  # the same reviews write_experiences drew
    data = [_incident(rng) for _ in range(24)]
    held_out = data[16:]
    receipts = tool([x for x, _ in held_out])
    expected = sum(r["selected_id"] == y for r, (_, y) in zip(receipts, held_out, strict=True)) / len(held_out)
    assert training.evaluate(tool, experiences[4:])["value"] == pytest.approx(expected)


@pytest.mark.parametrize("steps", [10, 25, 60])
def test_exact_match_agrees_with_greedy_decoding(steps):
    """Teacher-forced exact match equals comparing greedy decodings, at several stages of learning."""
    bot = Chatbot(dim=16, max_length=12)
    inputs, replies = ["hello there", "how are you", "bye"], ["hi there", "fine", "see you all"]
    trainer = training.Trainer.from_tool(bot, optimizer=lambda ps: torch.optim.Adam(ps, lr=0.03))
    experience = trainer.capture(inputs, replies, source="review:1")
    for _ in range(steps):
        trainer.step(experience)
    bot.eval()
    decoded = bot.generate(inputs)
    expected = sum(d == r for d, r in zip(decoded, replies, strict=True)) / len(replies)
    report = training.evaluate(bot, [experience])
    assert (report["metric"], report["value"], report["examples"]) == ("exact_match", expected, 3)
    if all(d.strip() for d in decoded):  # the model's own answers are matched exactly
        mirror = trainer.capture(inputs, decoded, source="self")
        assert training.evaluate(bot, [mirror])["value"] == 1.0


_RANKING = {
    "question": "Why did billing go down?",
    "evidence": [{"source_id": "log-1", "text": "the disk was full"}, {"source_id": "log-2", "text": "a deploy"}],
    "hypotheses": [{"id": "disk", "text": "the disk was full"}, {"id": "deploy", "text": "a bad deploy"}],
}
_PLANS = {
    "goal": "Recover the cache.",
    "evidence": [{"source_id": "monitor", "text": "The cache leaks memory."}],
    "plans": [{"id": "restart", "text": "Restart the cache."}, {"id": "wait", "text": "Wait."}],
}
_PICTURE = {"pixels": torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0)), "source_id": "camera:1",
            "question": "what is in the picture?"}
CASES = {
    "investigator/rank": ("investigator", "rank", _RANKING, "disk", "top1"),
    "investigator/verification": (
        "investigator", "verification", [{"premise": "It failed.", "hypothesis": "It worked."}], ["contradiction"],
        "accuracy",
    ),
    "investigator/proposal": ("investigator", "proposal", {"question": "Why?"}, "the disk", "exact_match"),
    "investigator/retrieval": (
        "investigator", "retrieval", {"queries": ["How was it restored?"], "documents": ["A restart.", "Lunch."]},
        [[True, False]], "recall@1",
    ),
    "decision/rank": ("decision", "rank", _RANKING, "deploy", "top1"),
    "planner/outcomes": ("planner", "outcomes", _PLANS, {"candidate_id": "wait", "outcome": 2.5}, "mse"),
    "planner/proposal": ("planner", "proposal", {"goal": "Recover it.", "evidence": []}, "Restart it.", "exact_match"),
    "scene/rank": ("scene", "rank", {**_PICTURE, "candidates": [{"id": "a", "text": "a red circle"},
                                                                {"id": "b", "text": "a blue square"}]}, "a", "top1"),
    "scene/language": ("scene", "language", _PICTURE, "a red circle", "exact_match"),
    "chatbot/reply": ("chatbot", "reply", "hello", "hi there", "exact_match"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_evaluate_gives_every_tool_mode_its_natural_metric(case):
    from tensorcode import tools

    name, mode, inputs, target, metric = CASES[case]
    tool = tools.create(name, mode=mode, seed=1)
    trainer = training.Trainer.from_tool(tool)
    experience = trainer.capture({"mode": mode, "inputs": inputs}, target, source="review:1")
    tool.eval()
    before = state(tool)
    report = training.evaluate(tool, [experience])
    assert report["metric"] == metric and report["examples"] >= 1
    assert report["value"] >= 0 and (metric == "mse" or report["value"] <= 1)
    assert report["loss"] >= 0 and same(state(tool), before) and not tool.training
