"""JSON codecs for experience values: primitives, bytes, lists/tuples, mappings, tensors, allowlisted dataclasses.

Every JSON object in an encoded value carries a ``"$"`` tag, so plain lists and primitives stay plain and the
decoder never guesses. Tensors are raw little-endian bytes in base64 with dtype and shape: compact and fast, and
never nested number lists. Nothing here imports a class named in a file or unpickles anything.
"""

from __future__ import annotations

import binascii
import dataclasses
import math
import re
import sys
import types
import uuid
from collections.abc import Iterator
from typing import Any

from ._tracing import is_tensor
from .errors import ExperienceError

try:  # SIMD base64, several times faster than binascii each way; optional, the results are identical
    import pybase64 as _base64
except ImportError:  # pragma: no cover - depends on the install
    _base64 = None

MAX_DEPTH = 100
MAX_DIMENSIONS = 32
# A tensor's element count must fit in a signed 64-bit integer with room for its byte size.
_MAX_ELEMENTS = 2**60

# dtype name -> (numpy little-endian dtype string or None, item size, floating)
_DTYPES = {
    "float64": ("<f8", 8, True),
    "float32": ("<f4", 4, True),
    "float16": ("<f2", 2, True),
    "bfloat16": ("<i2", 2, True),
    "int64": ("<i8", 8, False),
    "int32": ("<i4", 4, False),
    "int16": ("<i2", 2, False),
    "int8": ("|i1", 1, False),
    "uint8": ("|u1", 1, False),
    "bool": ("|b1", 1, False),
}


class Encoder:
    """Encodes values with an allowlist of dataclass codecs (``{"record-v1": Record}``)."""

    def __init__(self, codecs: dict | None, *, payloads: Payloads | None = None):
        self.payloads = payloads
        self.tags = {}
        for tag, cls in (codecs or {}).items():
            if not isinstance(tag, str) or not tag or not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
                raise ExperienceError(f"codec {tag!r} must map a nonempty string tag to a dataclass type")
            self.tags[cls] = tag

    def encode(self, value: Any, where: str, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ExperienceError(f"{where}: value is nested more than {MAX_DEPTH} levels deep")
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ExperienceError(f"{where}: non-finite float {value!r} cannot be saved")
            return value
        if isinstance(value, list):
            return [self.encode(v, where, depth + 1) for v in value]
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return {"$": "tuple", "items": [self.encode(v, where, depth + 1) for v in value]}
        if isinstance(value, (dict, types.MappingProxyType)):
            return {
                "$": "dict",
                "items": [
                    [self.encode(k, where, depth + 1), self.encode(v, where, depth + 1)] for k, v in value.items()
                ],
            }
        if isinstance(value, (bytes, bytearray)):
            return {"$": "bytes", "b64": _b64encode(value).decode("ascii")}
        if is_tensor(value):
            return encode_tensor(value, where, self.payloads)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            tag = self.tags.get(type(value))
            if tag is None:
                raise ExperienceError(
                    f"{where}: dataclass {type(value).__qualname__} has no codec; pass "
                    f"codecs={{'<tag>': {type(value).__name__}}} to save and load"
                )
            fields = {f.name: self.encode(getattr(value, f.name), where, depth + 1) for f in dataclasses.fields(value)}
            return {"$": "dataclass", "codec": tag, "fields": fields}
        raise ExperienceError(
            f"{where}: unsupported value of type {type(value).__qualname__} (opaque objects cannot be saved)"
        )


class Decoder:
    """Decodes values produced by ``Encoder``; every problem is an ``ExperienceError`` naming it."""

    def __init__(self, codecs: dict | None, *, payloads: list | None = None):
        self.codecs = dict(codecs or {})
        self.payloads = payloads

    def decode(self, data: Any, where: str, depth: int = 0, node=None) -> Any:
        """``node`` decodes tagged argument-tree nodes (refs, roots); plain values reject them."""
        if depth > MAX_DEPTH:
            raise ExperienceError(f"{where}: value is nested more than {MAX_DEPTH} levels deep")
        if data is None or isinstance(data, (bool, int, str)):
            return data
        if isinstance(data, float):
            if not math.isfinite(data):
                raise ExperienceError(f"{where}: non-finite number")
            return data
        if isinstance(data, list):
            return [self.decode(v, where, depth + 1, node) for v in data]
        if not isinstance(data, dict):
            raise ExperienceError(f"{where}: unexpected JSON value {type(data).__name__}")
        tag = data.get("$")
        if tag == "tuple":
            _keys(data, {"$", "items"}, where)
            return tuple(self.decode(v, where, depth + 1, node) for v in _list(data["items"], where))
        if tag == "dict":
            _keys(data, {"$", "items"}, where)
            out = {}
            for pair in _list(data["items"], where):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise ExperienceError(f"{where}: mapping items must be [key, value] pairs")
                key = self.decode(pair[0], where, depth + 1)
                try:
                    out[key] = self.decode(pair[1], where, depth + 1, node)
                except TypeError as exc:
                    raise ExperienceError(f"{where}: unhashable mapping key") from exc
            return out
        if tag == "bytes":
            _keys(data, {"$", "b64"}, where)
            return bytes(_b64(data["b64"], where, self.payloads))
        if tag == "tensor":
            return decode_tensor(data, where, self.payloads)
        if tag == "dataclass":
            _keys(data, {"$", "codec", "fields"}, where)
            cls = self.codecs.get(data["codec"]) if isinstance(data["codec"], str) else None
            if cls is None:
                raise ExperienceError(
                    f"{where}: dataclass codec {short(data['codec'])} is not in the allowlist "
                    f"(codecs={sorted(self.codecs)})"
                )
            fields = data["fields"]
            if not isinstance(fields, dict):
                raise ExperienceError(f"{where}: dataclass fields must be a mapping")
            names = {f.name for f in dataclasses.fields(cls)}
            if set(fields) != names:
                raise ExperienceError(
                    f"{where}: codec {data['codec']!r} fields {short(sorted(fields))} != {sorted(names)}"
                )
            values = {k: self.decode(v, where, depth + 1, node) for k, v in fields.items()}
            try:
                return cls(**values)
            except Exception as exc:  # noqa: BLE001 - application code given a file's values; any refusal counts
                raise ExperienceError(f"{where}: codec {data['codec']!r} rejected its fields: {exc}") from exc
        if node is not None and tag in ("ref", "root"):
            return node(data, where)
        raise ExperienceError(f"{where}: unknown codec tag {short(tag)}")


def encode_tensor(tensor, where: str, payloads: Payloads | None = None) -> dict:
    torch = sys.modules["torch"]
    if tensor.layout != torch.strided:
        raise ExperienceError(f"{where}: sparse tensors cannot be saved; make it dense with `.to_dense()`")
    if tensor.is_complex():
        raise ExperienceError(f"{where}: complex tensors cannot be saved")
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise ExperienceError(f"{where}: tensor dtype {name} is not supported ({', '.join(_DTYPES)})")
    data = tensor.detach()
    if data.is_floating_point() and not _finite(data):
        raise ExperienceError(f"{where}: tensor holds non-finite values (NaN or infinity)")
    data = data.to("cpu").contiguous()
    if name == "bfloat16":
        data = data.view(torch.int16)
    # base64 straight from the tensor's memory: no intermediate bytes copy.
    array = data.numpy().astype(_DTYPES[name][0], copy=False).reshape(-1).view("u1")
    encoded = _b64encode(array)
    b64 = payloads.add(encoded) if payloads is not None else encoded.decode("ascii")
    return {"$": "tensor", "dtype": name, "shape": list(tensor.shape), "b64": b64}


class Payloads:
    """Tensor payloads kept out of the JSON text until it is written.

    ``json.dumps`` scans and copies every character of every string, which made it the largest cost of saving a
    big tensor. The document holds a placeholder for each payload instead, and ``chunks`` splices the base64
    bytes in (base64 needs no JSON escaping). Placeholders carry a random token, so no application string in the
    document can be mistaken for one.
    """

    def __init__(self):
        self.token = uuid.uuid4().hex
        self.items: list[bytes] = []

    def add(self, encoded: bytes) -> str:
        self.items.append(encoded)
        return f"{self.token}:{len(self.items) - 1}"

    def chunks(self, text: str) -> Iterator[bytes]:
        """The ASCII JSON ``text`` as bytes, with every quoted placeholder replaced by its quoted payload."""
        parts = re.split(f'"{self.token}:([0-9]+)"', text)
        yield parts[0].encode("ascii")
        for index, rest in zip(parts[1::2], parts[2::2], strict=True):
            yield b'"'
            yield self.items[int(index)]
            yield b'"' + rest.encode("ascii")


def decode_tensor(data: dict, where: str, payloads: list | None = None):
    if data.get("layout", "strided") != "strided" or "indices" in data:
        raise ExperienceError(f"{where}: sparse tensor payloads are unsupported; store the dense tensor")
    _keys(data, {"$", "dtype", "shape", "b64"}, where)
    name, shape = data["dtype"], data["shape"]
    if isinstance(name, str) and name.startswith("complex"):
        raise ExperienceError(f"{where}: complex tensor payloads are unsupported")
    if not isinstance(name, str) or name not in _DTYPES:
        raise ExperienceError(f"{where}: unknown tensor dtype {short(name)}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ExperienceError(f"{where}: tensor shape must be a list of nonnegative integers")
    if len(shape) > MAX_DIMENSIONS:
        raise ExperienceError(f"{where}: tensor has too many dimensions ({len(shape)}; at most {MAX_DIMENSIONS})")
    # Every dimension counts, zeros included: torch refuses a shape whose strides overflow even when it is empty.
    if math.prod(max(d, 1) for d in shape) > _MAX_ELEMENTS:
        raise ExperienceError(f"{where}: tensor shape {short(shape)} has more elements than any tensor can hold")
    numpy_dtype, size, floating = _DTYPES[name]
    count = math.prod(shape)
    text = _payload(data["b64"], where, payloads)
    length = _decoded_length(text, where)  # before decoding: a payload of the wrong size allocates nothing
    if length != count * size:
        raise ExperienceError(
            f"{where}: tensor of shape {short(shape)} {name} needs {count * size} bytes, payload has {length}"
        )
    if len(text) > _TAIL:
        # A truncated or corrupted file is wrong at its end most often, which a decoder finds last: decoding the
        # tail first refuses it before the whole payload is decoded into memory.
        _b64decode(text[-_TAIL:], where)
    raw = _b64decode(text, where)
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ExperienceError(f"{where}: decoding tensors needs the vec extra (pip install 'tensorcode[vec]')") from exc
    kind = getattr(torch, name)
    if not count:
        return torch.empty(shape, dtype=kind)
    if sys.byteorder == "little":
        # The decoded bytearray becomes the tensor's storage: no copy.
        tensor = torch.frombuffer(raw, dtype=kind).reshape(shape)
    else:  # pragma: no cover - big-endian hosts
        import numpy

        array = numpy.frombuffer(raw, dtype=numpy_dtype)
        tensor = torch.from_numpy(array.astype(array.dtype.newbyteorder("="), copy=True)).reshape(shape)
        if name == "bfloat16":
            tensor = tensor.view(torch.bfloat16)
    if name == "bool" and bool(torch.frombuffer(raw, dtype=torch.uint8).max() > 1):
        raise ExperienceError(f"{where}: bool tensor payload holds values other than 0 and 1")
    if floating and not _finite(tensor):
        raise ExperienceError(f"{where}: tensor payload holds non-finite values (NaN or infinity)")
    return tensor


_TAIL = 4096  # base64 characters, a multiple of 4


def _finite(tensor) -> bool:
    # NaN and infinity propagate through a sum, so a finite sum proves every element finite; only a sum that
    # overflows needs the elementwise check, which costs many times more on a large tensor. That check runs in
    # slices: ``isfinite`` of a whole tensor allocates temporaries as large as it.
    torch = sys.modules["torch"]
    if bool(torch.isfinite(tensor.sum())):
        return True
    flat = tensor.reshape(-1)
    return all(bool(torch.isfinite(flat[i:i + 2**20]).all()) for i in range(0, flat.numel(), 2**20))


def lift_payloads(raw: bytes, limit: int | None = None) -> tuple[bytes | None, list]:
    """Take base64 payloads out of an encoded document before JSON parsing.

    The JSON parser scans and copies every character of a string, which made loading a large tensor several
    times slower than decoding its base64. Every ``"b64":"...`` value is replaced by ``"@<index>"`` and kept as a
    view of ``raw``; ``_b64`` resolves it. An unescaped ``"b64":"`` can only be a key and its value (a quote
    inside a JSON string is escaped), and base64 never contains ``@``, so placeholders cannot be confused.

    With ``limit``, the JSON besides the payloads may hold at most ``limit`` bytes; more returns ``None`` as
    soon as the search has passed that many bytes without a payload, so that a large file of nothing but JSON
    is refused after scanning ``limit`` bytes of it, not all of it.
    """
    marker = b'"b64":"'
    view = memoryview(raw)
    parts, payloads, position, kept = [], [], 0, 0
    while True:
        stop = None if limit is None else position + (limit - kept) + len(marker)
        start = raw.find(marker, position) if stop is None else raw.find(marker, position, stop)
        if start < 0:
            break
        begin = start + len(marker)
        end = raw.find(b'"', begin)
        if end < 0:
            break  # unterminated: the JSON parser reports the truncation
        placeholder = b"@%d" % len(payloads)
        parts += [view[position:begin], placeholder]
        kept += begin - position + len(placeholder)
        payloads.append(view[begin:end])
        position = end
    if limit is not None and kept + len(raw) - position > limit:
        return None, []
    if not payloads:
        return raw, payloads
    parts.append(view[position:])
    return b"".join(parts), payloads


def _b64(text: Any, where: str, payloads: list | None = None) -> bytearray:
    return _b64decode(_payload(text, where, payloads), where)


def _payload(text: Any, where: str, payloads: list | None):
    """The base64 text of a ``b64`` field: the string itself, or the lifted payload it names."""
    if not isinstance(text, str):
        raise ExperienceError(f"{where}: base64 payload must be a string")
    if payloads is not None and text.startswith("@"):
        try:
            return payloads[int(text[1:])]
        except (ValueError, IndexError) as exc:
            raise ExperienceError(f"{where}: invalid base64 payload") from exc
    return text


def _decoded_length(text, where: str) -> int:
    """The byte length strict base64 ``text`` decodes to (its padding is checked again while decoding)."""
    if len(text) % 4:
        raise ExperienceError(f"{where}: invalid base64 payload (length {len(text)} is not a multiple of 4)")
    tail = bytes(text[-2:]) if isinstance(text, memoryview) else text[-2:].encode("ascii", "replace")
    return len(text) // 4 * 3 - tail.count(b"=")


def _b64decode(text, where: str) -> bytearray:
    try:
        if _base64 is not None:
            return _base64.b64decode_as_bytearray(text, validate=True)
        # strict_mode is b64decode(validate=True) without its copy of the text into bytes.
        return bytearray(binascii.a2b_base64(text, strict_mode=True))
    except (binascii.Error, ValueError) as exc:
        raise ExperienceError(f"{where}: invalid base64 payload ({exc})") from exc


def _b64encode(data) -> bytes:
    if _base64 is not None:
        return _base64.b64encode(data)
    return binascii.b2a_base64(data, newline=False)


def short(value: Any, limit: int = 200) -> str:
    """``repr`` for a message, cut short: a hostile file can make any value megabytes long."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _keys(data: dict, expected: set, where: str) -> None:
    if set(data) != expected:
        raise ExperienceError(
            f"{where}: {short(data.get('$'))} entry has fields {short(sorted(data))}, expected {sorted(expected)}"
        )


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise ExperienceError(f"{where}: expected a list")
    return value
