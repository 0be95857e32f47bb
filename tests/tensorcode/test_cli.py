"""The ``tensorcode`` command line, run as a real subprocess from outside the checkout."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from test_run import write_experiences

from tensorcode.tools.chatbot import Chatbot
from tensorcode.tools.decision import Decision

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def tensorcode(*args, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "tensorcode", *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True,
        timeout=300,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def start(*args, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tensorcode", *map(str, args)], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A tool directory ``tool/`` and six experience files in ``experiences/``."""
    root = tmp_path_factory.mktemp("cli")
    (root / "experiences").mkdir()
    write_experiences(root / "experiences", 6)
    Decision(dim=16).save_pretrained(root / "tool")
    return root


@pytest.fixture(scope="module")
def trained(workspace) -> Path:
    """``tensorcode train`` run once on the workspace: the trained tool, with its checkpoint, for reading."""
    tensorcode("train", workspace / "tool", workspace / "experiences", "-o", workspace / "trained", "--device", "cpu",
               cwd=workspace)
    return workspace / "trained"


def _one_line_error(done: subprocess.CompletedProcess, match: str) -> None:
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("tensorcode: error: "), done.stderr
    assert match in done.stderr
    assert "Traceback" not in done.stderr


def test_train_writes_the_tool_and_rerunning_resumes(workspace, tmp_path):
    args = ("train", workspace / "tool", workspace / "experiences", "-o", tmp_path / "out", "--epochs", "2",
            "--interval", "4", "--optimizer", "adam", "--lr", "0.01", "--device", "cpu")
    first = tensorcode(*args, cwd=tmp_path)
    assert "trained decision: 12 steps" in first.stdout
    assert "step 1/12" in first.stderr and "step 4/12 epoch 1/2" in first.stderr and "(checkpoint)" in first.stderr
    assert (tmp_path / "out" / "tool.json").is_file()
    assert json.loads((tmp_path / "out" / "checkpoint" / "training.json").read_text())["progress"]["run"]["step"] == 12
    assert len(list((tmp_path / "out" / "checkpoint").glob("tensors-*.safetensors"))) == 2
    weights = (tmp_path / "out" / "model.safetensors").read_bytes()
    again = tensorcode(*args, cwd=tmp_path)
    assert "resumed at step 12" in again.stdout
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == weights


def test_train_killed_and_interrupted_resumes_to_the_same_tool(workspace, tmp_path, wait_until):
    """kill -9, then Ctrl-C (a clean stop), then a run to the end equals one uninterrupted run, byte for byte."""
    common = (workspace / "tool", workspace / "experiences", "--epochs", "20", "--interval", "5", "--seed", "3",
              "--optimizer", "adamw", "--lr", "0.01", "--device", "cpu")
    tensorcode("train", *common, "-o", tmp_path / "whole", cwd=tmp_path)
    manifest = tmp_path / "part" / "checkpoint" / "training.json"

    def step() -> int:
        return json.loads(manifest.read_text())["progress"]["run"]["step"] if manifest.is_file() else 0

    for sig, status in ((signal.SIGKILL, -signal.SIGKILL), (signal.SIGINT, 130)):
        before = step()
        process = start("train", *common, "-o", tmp_path / "part", cwd=tmp_path)

        def stepped(process=process, before=before) -> bool:
            assert process.poll() is None, process.communicate()
            return step() > before

        wait_until(stepped, timeout=120, what="a step past the last checkpoint")
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == status, stderr
        if sig == signal.SIGINT:
            assert "stopped at step" in stderr and "run the same command again to resume" in stderr
        assert not (tmp_path / "part" / "model.safetensors").exists()
    assert 0 < step() < 120
    finished = tensorcode("train", *common, "-o", tmp_path / "part", cwd=tmp_path)
    assert "resumed at step" in finished.stdout
    assert (tmp_path / "part" / "model.safetensors").read_bytes() == (
        tmp_path / "whole" / "model.safetensors"
    ).read_bytes()


def test_evaluate_prints_the_metric(workspace, tmp_path):
    done = tensorcode("evaluate", workspace / "tool", workspace / "experiences", "--json", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert report["metric"] == "top1" and report["examples"] == 24
    text = tensorcode("evaluate", workspace / "tool", *sorted((workspace / "experiences").glob("*.json")),
                      cwd=tmp_path)
    assert text.stdout.startswith("top1 ") and "on 24 examples (mean loss" in text.stdout


def test_inspect_summarizes_experience_checkpoint_and_tool(workspace, trained, tmp_path):
    experience = tensorcode("inspect", workspace / "experiences" / "experience-0.json", cwd=tmp_path).stdout
    assert "calls: 1" in experience and "loss decision.rank" in experience and "review:0/0" in experience
    assert "fingerprint decision:" in experience and "tensors: 1" in experience
    checkpoint = tensorcode("inspect", trained / "checkpoint", cwd=tmp_path).stdout
    assert "run: step 6 of 6" in checkpoint and "torch.optim" in checkpoint and "ON DISK" not in checkpoint
    tool = json.loads(tensorcode("inspect", trained, "--json", cwd=tmp_path).stdout)
    assert tool["tool"] == "decision" and tool["fingerprint"].startswith("decision:")
    assert tool["weights"]["tensors"] > 0


def test_validate_accepts_valid_files_and_names_the_problem_otherwise(workspace, trained, tmp_path):
    ok = tensorcode("validate", workspace / "tool", trained / "checkpoint",
                    workspace / "experiences" / "experience-1.json", cwd=tmp_path)
    assert ok.stdout.count("ok: ") == 3
    broken = tmp_path / "broken.json"
    text = (workspace / "experiences" / "experience-1.json").read_text()
    broken.write_text(text.replace('"loss":"decision.rank"', '"loss":7'))
    _one_line_error(tensorcode("validate", broken, cwd=tmp_path, check=False), "broken.json")
    Chatbot(dim=8).save_pretrained(tmp_path / "bot")
    _one_line_error(
        tensorcode("validate", workspace / "experiences" / "experience-1.json", "--tool", tmp_path / "bot",
                   cwd=tmp_path, check=False),
        "missing binding 'decision'",
    )


def test_errors_are_one_line_without_traceback_unless_debug(workspace, tmp_path):
    args = ("train", workspace / "tool", workspace / "experiences", "-o", tmp_path / "out", "--interval", "0")
    _one_line_error(tensorcode(*args, cwd=tmp_path, check=False), "interval: expected a positive integer")
    assert not (tmp_path / "out").exists()
    debug = tensorcode(*args, "--debug", cwd=tmp_path, check=False)
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "RunError" in debug.stderr
    _one_line_error(tensorcode("inspect", tmp_path / "missing", cwd=tmp_path, check=False), "no such file")
    usage = tensorcode("train", "--epochs", "x", cwd=tmp_path, check=False)
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1


def test_cli_start_up_does_not_import_torch_for_inspect(workspace, tmp_path):
    code = (
        "import sys; from tensorcode import cli; "
        f"cli.main(['inspect', {str(workspace / 'tool')!r}]); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.integration
def test_installed_script_trains_from_another_folder(workspace, tmp_path):
    """``pip install`` the repository into a fresh environment and run its ``tensorcode`` script elsewhere."""
    # Built from a copy (an in-tree build leaves build/ and *.egg-info behind) with this environment's setuptools,
    # no build isolation and no index; the fresh environment's own pip installs the wheel.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "tensorcode", source / "tensorcode", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "--wheel-dir", str(tmp_path / "dist"), str(source)],
        check=True, timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("tensorcode-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    # The test environment is itself a virtual environment, so "system" means the base interpreter's packages:
    # this environment's packages (torch, safetensors) are added after the new one's own site-packages instead.
    (site,) = (venv / "lib").glob("python*/site-packages")
    (site / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert pip.returncode == 0, pip.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    script = str(venv / "bin" / "tensorcode")
    done = subprocess.run(
        [script, "train", str(workspace / "tool"), str(workspace / "experiences"), "-o", "trained", "--epochs", "2",
         "--device", "cpu"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "trained decision: 12 steps" in done.stdout
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import tensorcode; print(tensorcode.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True)
    assert str(venv) in where.stdout, where.stdout  # the installed copy, not the checkout
    evaluate = subprocess.run([script, "evaluate", "trained", str(workspace / "experiences")], cwd=elsewhere,
                              env=env, capture_output=True, text=True, timeout=300)
    assert evaluate.returncode == 0 and evaluate.stdout.startswith("top1 "), evaluate.stderr


def _export_folder(workspace: Path, folder: Path, names: list[str]) -> Path:
    """An export's folder as the site writes it: experience parts, a manifest listing them, the answers' JSONL."""
    folder.mkdir()
    for i, name in enumerate(names):
        shutil.copy(workspace / "experiences" / f"experience-{i}.json", folder / name)
    manifest = {"format": "tensorcode-annotate-export", "tool": "decision", "files": [{"name": n} for n in names]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "answers.jsonl").write_text("{}\n")
    return folder


def test_an_exports_folder_stands_for_the_parts_its_manifest_lists(workspace, tmp_path):
    from tensorcode import cli

    folder = _export_folder(workspace, tmp_path / "export", ["part-00002.json", "part-00001.json"])
    (folder / "notes.json").write_text("{}")  # not listed: not an experience file of the export

    assert cli._experience_files([str(folder)]) == [folder / "part-00002.json", folder / "part-00001.json"]
    done = tensorcode("evaluate", workspace / "tool", folder, "--json", cwd=tmp_path)
    assert json.loads(done.stdout)["examples"] == 8  # two parts of four reviews; the manifest read as none


@pytest.mark.parametrize(("manifest", "match"), [
    ('{"files": [{"name": "part-00009.json"}]}', "lists part-00009.json, which is missing"),
    ('{"files": [{"name": "../experience-0.json"}]}', "'../experience-0.json' is not the name of a file beside"),
    ('{"files": [{"name": ".hidden.json"}]}', "'.hidden.json' is not the name of a file beside"),
    ('{"files": "part-00001.json"}', "not an export's manifest"),
    ("{not json", "not an export's manifest"),
])
def test_an_exports_folder_with_a_bad_manifest_is_refused_naming_it(workspace, tmp_path, manifest, match):
    from tensorcode import cli

    folder = _export_folder(workspace, tmp_path / "export", ["part-00001.json"])
    (folder / "manifest.json").write_text(manifest)

    with pytest.raises(ValueError, match=re.escape(match)) as refused:
        cli._experience_files([str(folder)])
    assert str(refused.value).startswith(f"{folder / 'manifest.json'}: ")


def _main(capsys, *args) -> tuple[int, str, str]:
    """``tensorcode ARGS`` in this process (torch is already imported here): status, stdout, stderr."""
    from tensorcode import cli

    status = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_named_pipe_is_refused_by_name_and_never_read(workspace, tmp_path):
    """A read of a pipe waits for a writer forever: training and evaluating named it a missing file or hung."""
    pipe = tmp_path / "experience.json"
    os.mkfifo(pipe)
    for args in (("inspect", pipe), ("validate", pipe), ("train", workspace / "tool", pipe, "-o", tmp_path / "out"),
                 ("evaluate", workspace / "tool", pipe)):
        _one_line_error(tensorcode(*args, cwd=tmp_path, check=False), "is a named pipe, not a regular file")
    assert not (tmp_path / "out").exists()


def test_an_oversized_experience_file_is_refused_before_it_is_read(workspace, tmp_path):
    import tracemalloc

    from tensorcode import tools, training

    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.truncate(257 * 2**20)  # sparse: no disk, but a read would allocate all of it
    tool = tools.load_pretrained(workspace / "tool")
    tracemalloc.start()
    try:
        with pytest.raises(training.RunError, match="over the limit of 268,435,456 bytes"):
            training.run(tool, [big])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak:,} bytes allocated to refuse it"


def test_training_does_not_write_into_a_folder_of_experiences_it_reads(workspace, tmp_path, capsys):
    """The trained tool's tool.json there would be read as an experience by the same command run again."""
    folder = shutil.copytree(workspace / "experiences", tmp_path / "experiences")
    for option in ("-o", "--checkpoint-dir"):
        extra = ("-o", tmp_path / "out") if option == "--checkpoint-dir" else ()
        status, _, err = _main(capsys, "train", workspace / "tool", folder, *extra, option, folder)
        assert status == 1 and f"{'--output' if option == '-o' else option}: {folder} is a directory of " \
            "experiences this run reads" in err
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (workspace / "experiences").iterdir())


def test_checkpoint_tensors_without_their_training_json_are_kept_not_started_over(workspace, tmp_path, capsys):
    args = ("train", workspace / "tool", workspace / "experiences", "-o", tmp_path / "out", "--epochs", "2",
            "--interval", "4", "--device", "cpu", "-q")
    assert _main(capsys, *args)[0] == 0
    checkpoint = tmp_path / "out" / "checkpoint"
    (checkpoint / "training.json").unlink()
    tensors = sorted(checkpoint.glob("tensors-*.safetensors"))

    status, _, err = _main(capsys, *args)

    assert status == 1 and "holds checkpoint tensors (tensors-" in err and "but no training.json" in err
    assert sorted(checkpoint.glob("tensors-*.safetensors")) == tensors  # a fresh run's saves deleted these


def test_inspect_says_when_the_tensors_file_is_not_the_size_training_json_records(trained, tmp_path, capsys):
    """It showed the recorded size of a truncated file, and nothing amiss."""
    checkpoint = shutil.copytree(trained / "checkpoint", tmp_path / "checkpoint")
    name = json.loads((checkpoint / "training.json").read_text())["tensors"]["file"]
    (checkpoint / name).write_bytes(b"")

    status, out, _ = _main(capsys, "inspect", checkpoint)

    assert status == 0 and f"{name} (" in out and "but 0 bytes ON DISK: run tensorcode validate" in out, out


def test_inspect_and_validate_take_the_folders_train_takes(workspace, tmp_path, capsys):
    folder = _export_folder(workspace, tmp_path / "export", ["part-00001.json", "part-00002.json"])
    for path, count in ((folder, 2), (workspace / "experiences", 6)):
        status, out, err = _main(capsys, "validate", path)
        assert status == 0 and out.count("ok: ") == count and "experience for decision" in out, err
        status, out, err = _main(capsys, "inspect", path, "--json")
        assert status == 0 and len(json.loads(out)) == count, err


def test_malformed_run_state_and_settings_are_named_not_python_errors(workspace, trained, tmp_path, capsys):
    checkpoint = shutil.copytree(trained / "checkpoint", tmp_path / "out" / "checkpoint")
    manifest = json.loads((checkpoint / "training.json").read_text())
    for progress, command, match in (
        ({"run": [1]}, "validate", "the training run cursor is malformed (not a JSON object)"),
        ([1], "train", "is not a training checkpoint (its operations and progress must be JSON objects)"),
    ):
        (checkpoint / "training.json").write_text(json.dumps({**manifest, "progress": progress}))
        args = (checkpoint,) if command == "validate" else (
            workspace / "tool", workspace / "experiences", "-o", tmp_path / "out", "--device", "cpu")
        status, _, err = _main(capsys, command, *args)
        assert status == 1 and match in err and "Error:" not in err, err
    status, _, err = _main(capsys, "train", workspace / "tool", workspace / "experiences", "-o", tmp_path / "seed",
                           "--seed", 10**26)
    assert status == 1 and "seed: expected an integer from -2**63 to 2**64 - 1" in err, err
    truncated = tmp_path / "truncated.json"
    truncated.write_text((workspace / "experiences" / "experience-0.json").read_text()[:100])
    status, _, err = _main(capsys, "evaluate", workspace / "tool", truncated)
    assert status == 1 and err.count(str(truncated)) == 1 and "not valid JSON" in err, err
    status, _, err = _main(capsys, "validate", workspace / "experiences" / "experience-0.json", "--tool",
                           tmp_path / "nowhere")
    assert status == 1 and err.startswith(f"tensorcode: error: --tool {tmp_path / 'nowhere'}: "), err


def test_ctrl_c_while_torch_loads_stops_before_the_first_step(workspace, tmp_path, capsys, monkeypatch):
    """Ctrl-C in the first moments of `train` interrupted torch's import: a later import then failed with a
    RecursionError. It now only asks the run to stop, and the run stops before it starts."""
    from tensorcode import tools

    load = tools.load_pretrained

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return load(*args, **kwargs)

    monkeypatch.setattr(tools, "load_pretrained", interrupted)
    status, _, err = _main(capsys, "train", workspace / "tool", workspace / "experiences", "-o", tmp_path / "out")

    assert status == 130 and "stopped before the first step; nothing was written" in err, err
    assert not (tmp_path / "out").exists()
