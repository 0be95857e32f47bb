"""The only module of the app that touches `tensorcode`: tools by name, predictions in a trace, targets checked.

Torch-free functions (`check_tool_mode`, `validate_inputs`, `validate_target`) run in the web process.
`load_version`, `predict_batch`, `capture_experience` and `check_experience_file` import torch and run only in
Celery workers (and management commands).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import tensorcode
from tensorcode import tools as _tools

TOOL_MODES: dict[str, tuple[str, ...]] = {name: tuple(modes) for name, modes in _tools.MODES.items()}

MAX_PREVIEW = 240  # characters of a value shown in a trace summary
MAX_STEPS = 60  # submodule calls kept per traced prediction
TRACE_VERSION = 1


def tool_names() -> tuple[str, ...]:
    """Registered tool names."""
    return tuple(TOOL_MODES)


def check_tool_mode(tool: str, mode: str) -> None:
    """Raise `ValueError` naming the valid choices when `tool` is not registered or has no mode `mode`."""
    if tool not in TOOL_MODES:
        raise ValueError(f"tool: unknown tool {tool!r}; registered tools: {', '.join(TOOL_MODES)}")
    if mode not in TOOL_MODES[tool]:
        raise ValueError(f"mode: {tool} has no mode {mode!r}; its modes: {', '.join(TOOL_MODES[tool])}")


def validate_inputs(tool: str, mode: str, inputs: Any, configuration: dict | None = None) -> Any:
    """One example's inputs, normalized; `ValueError` naming the field when the tool would reject them."""
    check_tool_mode(tool, mode)
    return _tools.validate_inputs(tool, mode, inputs, configuration=configuration or None)


def validate_target(tool: str, mode: str, inputs: Any, target: Any, configuration: dict | None = None) -> Any:
    """The normalized target; `ValueError` with the trainer's own message when training would reject it."""
    check_tool_mode(tool, mode)
    return _tools.validate_target(tool, mode, inputs, target, configuration=configuration or None)


def to_json(value: Any, *, nul: str | None = None) -> Any:
    """`value` as strict JSON data (no NaN/Infinity, tuples as lists, no NUL in text); `ValueError` otherwise.

    PostgreSQL cannot store a NUL character in JSON text, so one is refused here, naming where it is, rather
    than failing the write that follows; or, given `nul`, replaced by it (a model's output is shown, not refused).
    """
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not strict JSON data: {exc}") from exc
    data = json.loads(text)
    if "\\u0000" in text:  # every NUL is written as this escape; a literal backslash-u0000 in text matches too
        data = _without_nul(data, nul)
    return data


def _without_nul(data: Any, by: str | None, where: str = "") -> Any:
    """`data` with every NUL character in its strings and keys replaced `by`; `ValueError` naming the path of the
    first one when `by` is None."""
    def fix(text: str, path: str) -> str:
        if "\x00" not in text:
            return text
        if by is None:
            shown = path.replace("\x00", "\\u0000") or "the value"
            raise ValueError(f"{shown}: contains a NUL character (\\u0000), which cannot be stored")
        return text.replace("\x00", by)

    if isinstance(data, str):
        return fix(data, where)
    if isinstance(data, list):
        return [_without_nul(value, by, f"{where}[{index}]") for index, value in enumerate(data)]
    if isinstance(data, dict):
        paths = {key: f"{where}.{key}" if where else str(key) for key in data}
        return {fix(key, paths[key]): _without_nul(value, by, paths[key]) for key, value in data.items()}
    return data


# -- worker side: models, predictions, traces ------------------------------------------------------------------
def create_tool(tool: str, mode: str, configuration: dict):
    """A fresh, untrained tool of `configuration` for `mode`."""
    check_tool_mode(tool, mode)
    return _tools.create(tool, mode=mode, **(configuration or {}))


def check_configuration(tool: str, mode: str, configuration: dict) -> dict:
    """The configuration with defaults, or `ValueError` naming the bad field (builds nothing, but imports the
    tool's class and so torch: the library has no public torch-free configuration check yet)."""
    check_tool_mode(tool, mode)
    cls = _tools.get(tool)
    return cls.validate_configuration(cls.configuration_for_mode(mode, dict(configuration or {})))


def materialize(version) -> None:
    """Ensure `version.path` holds a tool: a fresh untrained version is created and saved on first use."""
    if version.is_materialized:
        return
    if version.trained:
        raise FileNotFoundError(f"model version {version.pk} has no tool.json in {version.directory}")
    tool = create_tool(version.tool, version.mode, version.project.configuration)
    tool.save_pretrained(version.path)


def register_version(project, source: Path, *, label: str = "", trained: bool = True, parent=None):
    """A new ModelVersion of `project` from a `save_pretrained` directory (worker or shell only).

    The directory is loaded strictly by its registered tool name; it must be the project's tool with a
    configuration that serves the project's mode. The tool is then saved afresh into the version's own
    directory, so nothing of `source` but the validated tool reaches the artifact root.
    """
    from annotate.models import ModelVersion

    tool = _tools.load_pretrained(str(source), device="cpu")
    name = getattr(tool, "NAME", None)
    if name != project.tool:
        raise ValueError(f"{source}: a {name!r} tool, but project {project.slug!r} uses {project.tool!r}")
    configuration = tool.configuration()
    try:
        expected = check_configuration(project.tool, project.mode, configuration)
    except ValueError as exc:
        raise ValueError(f"{source}: its configuration does not serve mode {project.mode!r}: {exc}") from exc
    if expected != configuration:
        raise ValueError(f"{source}: its configuration does not serve mode {project.mode!r}")
    version = ModelVersion.objects.allocate(project, label=label or f"registered from {Path(source).name}",
                                            trained=trained, parent=parent)
    tool.save_pretrained(version.path)
    return version


def load_version(version):
    """The version's tool in eval mode, loaded by its registered name (materialized first when untrained)."""
    materialize(version)
    return _load_cached(str(version.path), (version.path / "tool.json").stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _load_cached(path: str, _stamp: int):
    tool = _tools.load_pretrained(path, device="cpu")
    tool.eval()
    return tool


def predict_batch(version, inputs_list: Sequence[Any]) -> list[dict]:
    """Run the version's tool on `inputs_list` inside `tensorcode.trace()`.

    Returns one `{"receipt", "confidence", "calibrated_confidence", "trace"}` per input (the confidences as
    `confidences_of` reads them); `trace` is the JSON summary the item page shows as "how the model got here"
    (see `summarize_trace`).
    """
    import torch

    tool = load_version(version)
    inputs_list = list(inputs_list)
    with torch.no_grad(), _module_steps(tool) as steps, tensorcode.trace() as session:
        receipts = _predict(tool, version.mode, inputs_list)
    if len(receipts) != len(inputs_list):
        raise RuntimeError(f"{version.tool} returned {len(receipts)} receipts for {len(inputs_list)} inputs")
    model = {"tool": version.tool, "mode": version.mode, "version": version.pk, "trained": version.trained}
    results = []
    for index, (inputs, receipt) in enumerate(zip(inputs_list, receipts, strict=True)):
        # A generating model emits bytes; an untrained one can emit a NUL, shown as decoding shows bad bytes.
        receipt = to_json(receipt, nul="\ufffd")
        raw, calibrated = confidences_of(receipt)
        results.append(
            {
                "receipt": receipt,
                "confidence": raw,
                "calibrated_confidence": calibrated,
                "trace": summarize_trace(session, steps, index, len(inputs_list), inputs, receipt, model, tool=tool),
            }
        )
    return results


def confidence_of(receipt: dict) -> float | None:
    """The receipt's `confidence` (the queue orders by it); the top probability for receipts without one."""
    value = receipt.get("confidence")
    if value is None:
        probabilities = [c.get("probability") for c in receipt.get("candidates", []) if isinstance(c, dict)]
        probabilities = [p for p in probabilities if isinstance(p, (int, float))]
        value = max(probabilities) if probabilities else None
    if value is None or not math.isfinite(float(value)):
        return None
    return min(1.0, max(0.0, float(value)))


def confidences_of(receipt: dict) -> tuple[float | None, float | None]:
    """`(raw, calibrated)` confidence of a receipt; `calibrated` is None unless the receipt's calibration is fitted.

    A receipt with a fitted calibration (an Investigator verifier's) reports its selected label's calibrated
    probability as `confidence`; the raw one is that label's uncalibrated `probability`. The queue orders by
    the calibrated value when there is one (`Prediction.queue_confidence`).
    """
    calibration = receipt.get("calibration")
    if not (isinstance(calibration, dict) and calibration.get("fitted")):
        return confidence_of(receipt), None
    selected = receipt.get("selected_id")
    chosen = next((c for c in receipt.get("candidates", []) if isinstance(c, dict) and c.get("id") == selected), {})
    return _unit(chosen.get("probability")), _unit(chosen.get("calibrated_probability", receipt.get("confidence")))


def _unit(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        return None
    return min(1.0, max(0.0, float(value)))


def summarize_trace(session, steps: list[dict], index: int, batch: int, inputs: Any, receipt: dict, model: dict,
                    *, tool: Any = None):
    """The JSON summary of one prediction's traced call.

    `{"version", "model", "batch": {"size", "index"}, "operations": [{"name", "type", "kind", "status",
    "inputs": [value...], "outputs": [value...]}], "truncated"}`: the traced top-level calls followed by the
    tool's submodule calls in execution order (with shapes for the whole batch). The tool's own call is shown
    with this item's inputs and receipt; any other top-level call (a generating tool runs its modules outside
    its own call) with its own output and the calls it depends on, never with the item's receipt. A value is
    `{"type": "tensor", "shape", "dtype"}`, or `{"type", "preview"}`.
    """
    operations = []
    for call in session.calls:
        own = tool is None or call.op is tool
        if own:
            described_in, described_out = [describe_value(inputs)], [describe_value(receipt)]
        else:
            described_in = [{"type": "calls", "preview": ", ".join(f"#{d + 1}" for d in call.dependencies)}
                            ] if call.dependencies else []
            described_out = [describe_value(call.value)] if call.status == "ok" else []
        operations.append(
            {
                "name": call.name,
                "type": type(call.op).__name__,
                "kind": call.kind,
                "status": call.status,
                "error": call.error,
                "inputs": described_in,
                "outputs": described_out,
                "depends_on": list(call.dependencies),
            }
        )
    operations.extend(steps[:MAX_STEPS])
    return {
        "version": TRACE_VERSION,
        "model": model,
        "batch": {"size": batch, "index": index},
        "operations": operations,
        "truncated": len(steps) > MAX_STEPS,
    }


def describe_value(value: Any) -> dict:
    """A small JSON description of a value: tensors by shape and dtype, other values by a short preview."""
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return {"type": "tensor", "shape": list(shape), "dtype": str(value.dtype).replace("torch.", "")}
    if isinstance(value, str):
        return {"type": "text", "preview": _clip(value), "length": len(value)}
    if isinstance(value, (bool, int, float)) or value is None:
        return {"type": type(value).__name__, "preview": _clip(json.dumps(value))}
    if isinstance(value, (list, tuple)):
        if value and all(getattr(v, "shape", None) is not None for v in value):
            return {"type": "list", "length": len(value), "items": [describe_value(v) for v in value[:8]]}
        return {"type": "list", "length": len(value), "preview": _clip(_json_preview(value))}
    if isinstance(value, dict):
        return {"type": "object", "keys": [str(k) for k in list(value)[:20]], "preview": _clip(_json_preview(value))}
    return {"type": type(value).__name__, "preview": _clip(repr(value))}


def _json_preview(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=lambda v: f"<{type(v).__name__}>")
    except (TypeError, ValueError):
        return repr(value)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_PREVIEW else text[: MAX_PREVIEW - 1] + "…"


@contextlib.contextmanager
def _module_steps(tool) -> Iterator[list[dict]]:
    """Record each submodule call of `tool` (name, type, input and output shapes) while the block runs."""
    steps: list[dict] = []
    handles = []

    def hook_for(name: str):
        def hook(module, args, output):
            if len(steps) <= MAX_STEPS:
                steps.append(
                    {
                        "name": name,
                        "type": type(module).__name__,
                        "kind": "module",
                        "status": "ok",
                        "inputs": [describe_value(a) for a in args[:4]],
                        "outputs": [describe_value(o) for o in (output if isinstance(output, tuple) else (output,))][
                            :4
                        ],
                    }
                )

        return hook

    try:
        for name, module in tool.named_modules():
            if name:  # the tool itself is the traced top-level call
                handles.append(module.register_forward_hook(hook_for(name)))
        yield steps
    finally:
        for handle in handles:
            handle.remove()


def _predict(tool, mode: str, inputs_list: list) -> list[dict]:
    return list(_tools.predict(tool, mode, inputs_list))


# -- experience files ------------------------------------------------------------------------------------------
def trainer_for(version, *, capture_only: bool = False):
    """`Trainer.from_tool` on the version's tool (a private copy: the trainer switches it to training mode).

    `capture_only`: for capturing and loading experience; such a trainer refuses to train (`_capture_only`).
    """
    from tensorcode import training

    materialize(version)
    tool = _tools.load_pretrained(str(version.path), device="cpu")
    return training.Trainer.from_tool(tool, optimizer=_capture_only if capture_only else None)


def trainer_for_project(project):
    """A capture-only trainer on the project's current version, or on a fresh tool of its configuration when
    it has none.

    Capturing records inputs and targets, not weights, so any version of the same configuration binds.
    """
    from tensorcode import training

    if project.current_version is not None:
        return trainer_for(project.current_version, capture_only=True)
    return training.Trainer.from_tool(create_tool(project.tool, project.mode, project.configuration),
                                      optimizer=_capture_only)


def _capture_only(parameters):
    """The optimizer of a trainer that captures and loads experience but never updates a weight (exports).

    `Trainer.from_tool` would build SGD, and the constructor of any torch optimizer imports torch._dynamo: about
    80 MB of an export's memory and a second of its start-up, for an optimizer that never steps.
    """
    from collections import OrderedDict

    import torch

    class CaptureOnly(torch.optim.Optimizer):
        def __init__(self, params) -> None:  # not super().__init__: that is what imports torch._dynamo
            self.defaults, self.state, self.param_groups = {}, {}, [{"params": list(params)}]
            self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = OrderedDict(), OrderedDict()

        def zero_grad(self, set_to_none: bool = True) -> None:
            self.step()

        def step(self, closure=None):
            raise RuntimeError("this trainer only captures and loads experience; it never updates weights")

    return CaptureOnly(parameters)


def capture_experience(trainer, mode: str, inputs_list: list, targets: list, sources: list[str], path: Path, *,
                       durable: bool = True) -> None:
    """Capture one minibatch (one source per example) with the trainer and save it as an experience file
    (`durable=False`: not fsynced, for a caller that makes its files durable together, `storage.make_durable`)."""
    envelope = {"mode": mode, "inputs": list(inputs_list)}
    session = trainer.capture(envelope, list(targets), source=list(sources))
    session.save(str(path), operations=trainer.operations, release=True, durable=durable)


def load_experience(trainer, path: Path):
    """Load an experience file with the library's safe loader, bound to the trainer's operations."""
    from tensorcode import training

    return training.load_experience(str(path), operations=trainer.operations)


def check_experience_file(version, path: Path) -> dict:
    """Load an uploaded experience file against the version's tool; `ValueError` with the reason if refused.

    Returns `{"calls", "supervisions", "sources"}`. A file whose calls do not bind to the tool's training
    operations (other names, another configuration fingerprint), malformed JSON, unsupported payloads or no
    supervision at all are refused.
    """
    from tensorcode import ExperienceError, TraceError

    trainer = trainer_for(version)
    try:
        session = load_experience(trainer, path)
    except (ExperienceError, TraceError, ValueError, TypeError, OSError, RecursionError) as exc:
        raise ValueError(f"refused: {exc}") from exc
    if not session.supervisions:
        raise ValueError("refused: the file has no supervision records, so there is nothing to train on")
    known = set(trainer_losses(trainer))
    for record in session.supervisions:
        if record.loss not in known:
            raise ValueError(f"refused: loss {record.loss!r} is not one of the tool's losses {sorted(known)}")
    sources = []
    for record in session.supervisions:
        sources.extend(record.source if isinstance(record.source, tuple) else [record.source])
    return {"calls": len(session.calls), "supervisions": len(session.supervisions), "sources": sources[:1000]}


def trainer_losses(trainer) -> list[str]:
    return list(trainer._losses) if hasattr(trainer, "_losses") else list(trainer.tool.training_losses())
