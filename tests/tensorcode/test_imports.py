"""Import costs and independence, checked in fresh interpreters: the core never loads torch, and a trace needs no
trainer or packaged tool."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


def run_python(source: str, tmp_path: Path) -> str:
    """Run ``source`` in a fresh interpreter (the repository importable, cwd ``tmp_path``); return its stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_importing_tensorcode_and_training_does_not_import_torch(tmp_path):
    out = run_python(
        """
        import sys
        import tensorcode
        import tensorcode.training
        from tensorcode import training
        assert callable(training.load_experience) and callable(tensorcode.trace)
        print(sorted(name for name in sys.modules if name == "torch" or name.startswith("torch.")))
        """,
        tmp_path,
    )
    assert out.strip() == "[]"


def test_experience_without_tensors_round_trips_without_torch(tmp_path):
    """Trace, save, load and replay plain-data operations with torch made unimportable."""
    out = run_python(
        """
        import sys
        sys.modules["torch"] = None  # any import of torch now raises ImportError

        from tensorcode import InputRef, OutputRef, external, operation, trace
        from tensorcode import training

        @operation
        def tokenize(text):
            return text.lower().split()

        @external
        def lookup(words):
            return {"count": len(words)}

        @operation
        def describe(words, facts):
            return f"{words[0]}:{facts['count']}"

        with trace() as session:
            words = tokenize("Hello Traced World")
            summary = describe(words, lookup(words))
        session.supervise(session.calls[2].output, "hello:3", loss="exact", source="human:review-1")
        ops = {"tokenize": tokenize, "lookup": lookup, "describe": describe}
        session.save("experience.json", operations=ops, release=True)

        loaded = training.load_experience("experience.json", operations=ops)
        assert loaded.value(InputRef(0)) == "Hello Traced World"
        assert loaded.replay(OutputRef(2), boundary="recorded") == "hello:3"
        assert loaded.supervisions[0].target == "hello:3"
        print("ok", [call.kind for call in loaded.calls])
        """,
        tmp_path,
    )
    assert out.strip() == "ok ['pure', 'external', 'pure']"


def test_trace_is_collected_saved_and_replayed_without_a_trainer_or_tool(tmp_path):
    out = run_python(
        """
        import sys
        import torch
        from torch import nn
        from tensorcode import trace, training

        torch.set_num_threads(1)
        encoder, head = nn.Linear(4, 8), nn.Linear(8, 3)
        with trace() as session:
            prediction = head(encoder(torch.randn(2, 4)))
        assert [call.dependencies for call in session.calls] == [(), (0,)]
        record = session.supervise(prediction, [0, 2], source="human:review-42")
        operations = {"encoder": encoder, "head": head}
        session.save("experience.json", operations=operations, release=True)
        loaded = training.load_experience("experience.json", operations=operations)
        assert torch.allclose(loaded.replay(loaded.supervisions[0].output), prediction)
        assert loaded.supervisions[0].output == record.output
        print(sorted(name for name in sys.modules if name.startswith(("tensorcode.tools", "tensorcode.training._"))))
        """,
        tmp_path,
    )
    assert out.strip() == "[]"
