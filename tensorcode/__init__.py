"""tensorcode: trace calls into a DAG, attach sourced supervision, save portable experience, train owned tools.

Importing it does not import torch: tracing is pure Python and intercepts ``torch.nn.Module`` calls only when
torch is already in use.
"""

from ._operations import Operation, external, operation
from ._refs import InputRef, OutputRef
from ._trace import Trace, trace
from .errors import CheckpointError, ExperienceError, FingerprintError, StaleIndexError, ToolError, TraceError

__all__ = [
    "CheckpointError", "ExperienceError", "FingerprintError", "InputRef", "Operation", "OutputRef",
    "StaleIndexError", "ToolError", "Trace", "TraceError", "external", "operation", "trace",
]
__version__ = "0.1.0"
