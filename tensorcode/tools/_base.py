"""The shared shape of an owned tool: validated JSON configuration, pretrained artifacts, training protocol.

A tool is a small ``torch.nn.Module`` that owns its parameters. ``Trainer.from_tool`` relies only on the
protocol defined here (``training_operations``, ``training_losses``, ``prepare_capture``,
``apply_training_mode``); everything else is the tool's own business.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .._atomic import write_atomic
from .._fingerprint import type_name
from ..errors import ToolError
from ._artifacts import MANIFEST, WEIGHTS, manifest_text, read_manifest, read_weights, tool_directory
from ._configuration import Configuration
from ._protocol import CapturePlan
from ._registry import REGISTERED

__all__ = ["CapturePlan", "Tool"]

_DTYPE_CODES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.int32: "I32", torch.float32: "F32", torch.int64: "I64", torch.float64: "F64",
}


class Tool(nn.Module):
    """Base class of the owned tools.

    Subclasses declare ``FIELDS`` (documented configuration fields and their defaults), build their modules in
    ``build()``, and implement ``objective(batch)`` (the differentiable training forward), ``losses()`` and
    ``plan_capture(inputs, targets)``.
    """

    FIELDS: ClassVar[dict[str, Any]] = {}
    NAME: ClassVar[str] = "tool"
    # The library's tools declare their configuration as a frozen dataclass (defaults and bounds in one place);
    # FIELDS is then its defaults. A tool of your own may declare FIELDS and check_configuration instead.
    CONFIG: ClassVar[type[Configuration] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The registered tools are fingerprinted by name, never by module path; other subclasses (a user's own
        # tool, or a subclass of a registered one) keep their qualified class name.
        registered = REGISTERED.get(cls.NAME)
        package, _, module = cls.__module__.rpartition(".")
        if registered == (module, cls.__qualname__) and package == __package__:
            cls.FINGERPRINT_TYPE = f"tool:{cls.NAME}"

    def __init__(self, **configuration: Any):
        super().__init__()
        self._configuration = self.validate_configuration(configuration)
        seed = self._configuration.get("seed")
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.build()
        object.__setattr__(self, "_objective_op", _Objective(self))

    # -- configuration -------------------------------------------------------------------------------------
    @classmethod
    def validate_configuration(cls, configuration: dict) -> dict:
        """Defaults filled in; an unknown field is refused naming it and the valid fields."""
        if cls.CONFIG is not None:
            return cls.CONFIG.from_mapping(configuration).as_dict()
        unknown = sorted(set(configuration) - set(cls.FIELDS))
        if unknown:
            valid = ", ".join(sorted(cls.FIELDS))
            raise ValueError(f"{cls.__name__}: unknown configuration field {unknown[0]!r}; valid fields: {valid}")
        for name, value in configuration.items():
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{name}: configuration values must be JSON-safe data ({exc})") from exc
        merged = {**json.loads(json.dumps(cls.FIELDS)), **json.loads(json.dumps(configuration))}
        cls.check_configuration(merged)
        return merged

    @classmethod
    def check_configuration(cls, configuration: dict) -> None:
        """Subclass hook: raise ``ValueError`` naming a bad field value."""

    @classmethod
    def configuration_for_mode(cls, mode: str, configuration: dict) -> dict:
        """The configuration of a fresh tool for ``mode`` (``tools.create``)."""
        return dict(configuration) if cls.CONFIG is None else cls.CONFIG.for_mode(mode, configuration)

    def configuration(self) -> dict:
        return json.loads(json.dumps(self._configuration))

    def build(self) -> None:  # pragma: no cover - every tool overrides it
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        for tensor in self.parameters():
            return tensor.device
        return torch.device("cpu")

    # -- artifacts -----------------------------------------------------------------------------------------
    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write ``tool.json`` (format, version, registered name, configuration) and ``model.safetensors``."""
        from safetensors.torch import save

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().to("cpu").contiguous().clone() for k, v in self.state_dict().items()}
        write_atomic(directory / WEIGHTS, save(state))
        write_atomic(directory / MANIFEST, manifest_text(self.NAME, self.configuration()))

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, *, device: str | torch.device = "cpu") -> Tool:
        """Load a tool saved by ``save_pretrained`` of this same tool, strictly, in eval mode.

        Nothing large is built before the manifest, the configuration (against its upper bounds) and the
        weights' safetensors header (names, shapes, dtypes, byte ranges) have been checked; non-finite weights
        are refused. Files must be regular files inside ``directory``. Raises ``ToolError`` (a ``ValueError``)
        naming the problem for any bad artifact.
        """
        from safetensors import SafetensorError
        from safetensors.torch import load

        directory = tool_directory(directory)
        manifest = read_manifest(directory)
        if manifest.tool != cls.NAME:
            raise ToolError(f"{directory} holds a {manifest.tool!r} tool, not {cls.NAME!r}")
        try:
            configuration = cls.validate_configuration(manifest.configuration)
        except ValueError as exc:
            raise ToolError(f"{directory / MANIFEST}: configuration: {exc}") from exc
        # The layout the weights must have, from a skeleton on the meta device: no memory for its tensors.
        skeleton = meta_skeleton(cls, configuration)
        if skeleton.configuration() != configuration:
            raise ToolError(f"{directory}: configuration does not round-trip through {cls.__name__}")
        expected = {
            k: (_DTYPE_CODES.get(v.dtype, str(v.dtype)), tuple(v.shape)) for k, v in skeleton.state_dict().items()
        }
        data, _ = read_weights(directory, expected)
        try:
            state = load(data)
        except (SafetensorError, ValueError) as exc:
            raise ToolError(f"{directory / WEIGHTS}: cannot read weights: {exc}") from exc
        for key, value in sorted(state.items()):
            if (value.is_floating_point() or value.is_complex()) and not bool(torch.isfinite(value).all()):
                raise ToolError(f"{directory / WEIGHTS}: {key} holds NaN or infinite values")
        tool = cls(**configuration)
        tool.load_state_dict(state, strict=True)
        return tool.to(device).eval()

    # -- training protocol used by Trainer.from_tool -------------------------------------------------------
    def training_operations(self) -> dict[str, nn.Module]:
        """Stable operation bindings: the one declared training operation, named for the tool."""
        return {self.NAME: self._objective_op}

    def training_losses(self) -> dict:
        """Loss name -> ``fn(output, target) -> scalar tensor`` for this tool's objectives."""
        return self.losses()

    def prepare_capture(self, inputs: Any, targets: Any) -> CapturePlan:
        """Validate inputs and targets (``ValueError`` naming the field) before anything is recorded."""
        return self.plan_capture(inputs, targets)

    def apply_training_mode(self) -> None:
        """Training-mode policy: train everything except frozen parts (``frozen_modules()``), kept in eval."""
        self.train()
        for module in self.frozen_modules():
            module.eval()

    def frozen_modules(self) -> list[nn.Module]:
        return []

    def loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        """The training loss of ``inputs``/``targets`` (the forms ``capture`` takes), differentiable, computed
        outside any trainer: the same validation, objective and loss as a captured step."""
        plan = self.plan_capture(inputs, targets)
        return self.losses()[plan.loss](self.objective(plan.inputs), plan.target)

    # -- subclass hooks ------------------------------------------------------------------------------------
    def objective(self, batch: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def losses(self) -> dict:  # pragma: no cover
        raise NotImplementedError

    def plan_capture(self, inputs: Any, targets: Any) -> CapturePlan:  # pragma: no cover
        raise NotImplementedError


def meta_skeleton(cls: type[Tool], configuration: dict) -> Tool:
    """A tool built on the meta device, uninitialised: its parameters' names, shapes and dtypes, no memory."""
    with torch.device("meta"), _SkipInitialisation():
        return cls(**configuration)


class _SkipInitialisation(TorchFunctionMode):
    """Builds a skeleton without computing tensor values: a meta tensor holds none.

    Many meta kernels (``normal_``, ``eye``, every out-of-place arithmetic op) are written in Python and import
    ``torch._dynamo`` on first use, which took seconds of ``from_pretrained`` for a tool that, unless it
    trains, never needs it. So initialisers and value-only in-place calls are skipped, and ``eye`` and scalar or
    tensor arithmetic are answered with an empty meta tensor of the shape and dtype torch would give them. The
    layout comes out as a real build makes it (``tests/tensorcode/tools/test_artifact_loading.py`` checks every
    registered tool); any other call runs as usual.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", None)
        if func in _INITIALISERS:
            return args[0] if args else kwargs["tensor"]
        if name in _VALUE_METHODS and args and _meta(args[0]):
            return args[0]
        if func is torch.eye and "out" not in kwargs:
            rows = args[0] if args else kwargs.pop("n")
            columns = args[1] if len(args) > 1 else kwargs.pop("m", None)
            return torch.empty(rows, rows if columns is None else columns, **kwargs)
        if func is torch.stack and args and _all_meta(args[0]) and "out" not in kwargs and len(args) + len(kwargs) <= 2:
            tensors, dim = list(args[0]), args[1] if len(args) > 1 else kwargs.get("dim", 0)
            shape = list(tensors[0].shape)
            if all(t.shape == tensors[0].shape for t in tensors) and -len(shape) - 1 <= dim <= len(shape):
                shape.insert(dim % (len(shape) + 1), len(tensors))
                dtype = functools.reduce(torch.promote_types, (t.dtype for t in tensors))
                return torch.empty(shape, dtype=dtype, device="meta")
        if (
            name in _ARITHMETIC
            and len(args) == 2
            and not kwargs
            and all(_meta(a) or type(a) in (int, float, bool) for a in args)
            and any(_meta(a) for a in args)
        ):
            dtype = torch.result_type(*args)
            if "div" in name and not (dtype.is_floating_point or dtype.is_complex):
                dtype = torch.get_default_dtype()
            shape = torch.broadcast_shapes(*(a.shape for a in args if isinstance(a, torch.Tensor)))
            return torch.empty(shape, dtype=dtype, device="meta")
        return func(*args, **kwargs)


def _meta(value) -> bool:
    return isinstance(value, torch.Tensor) and value.is_meta


def _all_meta(values) -> bool:
    return isinstance(values, (list, tuple)) and bool(values) and all(_meta(v) for v in values)


_INITIALISERS = frozenset(
    getattr(nn.init, name)
    for name in dir(nn.init)
    if name.endswith("_") and not name.startswith("_") and callable(getattr(nn.init, name))
)
# In-place tensor methods that change values only (never shape, dtype or device): what initialisers call.
_VALUE_METHODS = frozenset(
    {
        "normal_", "uniform_", "random_", "exponential_", "bernoulli_", "cauchy_", "log_normal_", "geometric_",
        "zero_", "fill_", "fill_diagonal_", "copy_", "erfinv_", "mul_", "div_", "add_", "sub_", "clamp_",
        "clamp_min_", "clamp_max_", "sqrt_", "abs_", "neg_", "exp_", "sign_", "masked_fill_", "index_fill_",
    }
)
_ARITHMETIC = frozenset(
    {
        "add", "__add__", "__radd__", "sub", "__sub__", "__rsub__", "mul", "__mul__", "__rmul__", "div",
        "__truediv__", "__rtruediv__",
    }
)


class _Objective(nn.Module):
    """The declared training operation: one traced call of the tool's differentiable objective.

    It holds the tool as its only submodule, so the operation's parameters are exactly the tool's, and the
    tool's submodule calls inside it are not recorded separately.
    """

    FINGERPRINT_TYPE: ClassVar[str] = "tool-objective"

    def __init__(self, tool: Tool):
        super().__init__()
        self.tool = tool

    def configuration(self) -> dict:
        # Input limits bound requests, not what the model computes: raising one must not orphan experiences or
        # checkpoints, so they stay out of the fingerprint.
        configuration = {k: v for k, v in self.tool.configuration().items() if k != "limits"}
        return {"tool": type_name(type(self.tool)), "configuration": configuration}

    def forward(self, batch: Any) -> Any:
        return self.tool.objective(batch)
