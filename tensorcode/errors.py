"""Exception types of the library. Every public error is a ``ValueError`` or ``RuntimeError`` subclass."""

from __future__ import annotations


class ExperienceError(ValueError):
    """An experience could not be saved or loaded: the message names what is wrong.

    ``load_experience`` raises only this type for a malformed or incompatible file.
    """


class TraceError(RuntimeError):
    """A trace was used in a way that would make its record wrong (mutation, pending work, closed session)."""


class FingerprintError(ValueError):
    """An operation's semantics cannot be described safely (opaque state, closures without configuration)."""


class CheckpointError(ValueError):
    """A checkpoint could not be saved or loaded. The message names the problem; nothing was changed."""


class ToolError(ValueError):
    """A tool artifact (``tool.json`` and ``model.safetensors``) could not be loaded; the message names the
    problem. ``load_pretrained`` and ``from_pretrained`` raise only this type for a bad artifact."""


class StaleIndexError(RuntimeError):
    """An episodic index was queried after the encoder that embedded its records changed; call ``rebuild()``."""
