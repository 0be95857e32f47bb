"""The safetensors format, written from and read into tensor memory directly, for files nobody vouches for.

Writing streams the header and then each tensor's bytes; nothing is assembled in memory. Reading is split in
two so a caller can check what a file holds before paying for it: ``read_header`` parses and checks the header
alone (bounded size, containers and nesting; every dtype, shape and offset; offsets tiling the data exactly,
so the file size is the sum of its tensors), then ``read_data`` reads each tensor straight into its own new
storage, hashing the bytes on the way (on a second thread, while the next bytes are read). No byte is copied
twice and no file is mapped, so a file truncated by someone else mid-load is a refused load, not a crash
(``SIGBUS``).
"""

from __future__ import annotations

import json
import math
import queue
import struct
import sys
import threading

MAX_HEADER_BYTES = 100 * 2**20  # what the safetensors library itself accepts
MAX_DIMENSIONS = 32
_MAX_ELEMENTS = 2**60
# Read and hashed in pieces that stay in the CPU's cache: SHA-256 over bytes just read runs ~1.6x faster than
# over bytes that have gone back to main memory (measured with bench/checkpoint_io.py).
_CHUNK = 256 * 2**10
_IN_FLIGHT = 8  # chunks the reader may be ahead of the hashing thread, so what it hashes is still cached
_THREADED = 16 * 2**20  # data from which hashing on its own thread pays for the thread
DTYPES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "complex64": "C64",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}
_NAMES = {code: name for name, code in DTYPES.items()}
_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
          "U16": 2, "U32": 4, "U64": 8, "C64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


class Entry:
    """One tensor of a safetensors header: ``name``, torch ``dtype`` name, ``shape``, ``begin`` and ``end``."""

    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name: str, dtype: str, shape: list[int], begin: int, end: int):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end


def chunks(tensors: dict, metadata: dict):
    """The safetensors serialization of contiguous CPU ``tensors``: header length, JSON header, raw data."""
    import torch

    if sys.byteorder != "little":  # pragma: no cover - safetensors stores little-endian data; let it swap
        from safetensors.torch import save

        yield save(tensors, metadata=metadata)
        return
    header, offset = {"__metadata__": metadata}, 0
    for key, tensor in tensors.items():
        code = DTYPES.get(str(tensor.dtype).removeprefix("torch."))
        if code is None:
            raise ValueError(f"{key}: dtype {tensor.dtype} cannot be stored in safetensors")
        size = tensor.numel() * tensor.element_size()
        header[key] = {"dtype": code, "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned, as safetensors writes it
    yield struct.pack("<Q", len(text))
    yield text
    for tensor in tensors.values():
        if tensor.numel():
            yield memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


def read_header(handle, size: int, *, max_tensors: int, error: type[Exception], where: str):
    """``(entries by name, metadata, header bytes)`` of the safetensors file open as ``handle`` (``size`` bytes).

    At most ``max_tensors`` entries; every problem is ``error`` naming it, before any tensor data is read.
    """
    prefix = handle.read(8)
    if len(prefix) != 8:
        raise error(f"{where} is not a readable safetensors file: {size} bytes is too short for a header")
    (length,) = struct.unpack("<Q", prefix)
    if length > min(MAX_HEADER_BYTES, size - 8):
        raise error(f"{where} is not a readable safetensors file: its header claims {length:,} bytes of {size:,}")
    text = handle.read(length)
    if len(text) != length:
        raise error(f"{where} shrank while it was read")
    # One object per tensor, two lists inside it, one metadata object. Some slack lets a few unexpected tensors
    # be named precisely by the caller; far more is refused before parsing.
    if text.count(b"{") + text.count(b"[") > 3 * (max_tensors + 64):
        raise error(f"{where}: the safetensors header holds far more than the {max_tensors} tensors expected")
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise error(f"{where} is not a readable safetensors file: its header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise error(f"{where} is not a readable safetensors file: its header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise error(f"{where}: safetensors metadata must map strings to strings")
    entries = {name: _entry(name, info, error, where) for name, info in header.items()}
    data, offset = size - 8 - length, 0
    for entry in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if entry.begin != offset:
            raise error(f"{where}: tensor {entry.name!r} starts at byte {entry.begin}, not {offset}: the data "
                        "section has gaps or overlaps")
        offset = entry.end
    if offset != data:
        raise error(f"{where}: the tensors hold {offset:,} bytes but the data section is {data:,}")
    return entries, metadata, prefix + text


def read_data(handle, entries: dict, digest, *, error: type[Exception], where: str) -> dict:
    """Each entry's tensor, read in file order into its own storage; ``digest`` is updated with every byte.

    SHA-256 costs more than reading, and both release the GIL: for more than a few megabytes, each chunk is
    hashed on another thread while the next ones are read, in order, with the reader at most a few chunks ahead
    so that the hashing thread reads bytes still in cache.
    """
    import torch

    if sys.byteorder != "little":  # pragma: no cover
        raise error(f"{where}: safetensors data is little-endian; this host is big-endian")
    total = sum(entry.end - entry.begin for entry in entries.values())
    hasher = _Hasher(digest) if total >= _THREADED else None
    update = digest.update if hasher is None else hasher.update
    tensors = {}
    try:
        for entry in sorted(entries.values(), key=lambda e: e.begin):
            count = entry.end - entry.begin
            storage = torch.empty(count, dtype=torch.uint8)
            view = memoryview(storage.numpy()) if count else memoryview(b"")
            done = 0
            while done < count:
                try:
                    got = handle.readinto(view[done:done + _CHUNK])
                except OSError as exc:
                    raise error(f"{where}: cannot read tensor {entry.name!r}: {exc}") from exc
                if not got:
                    raise error(f"{where} shrank while it was read (tensor {entry.name!r} is cut short)")
                update(view[done:done + got])
                done += got
            if entry.dtype == "bool" and count and int(storage.max()) > 1:
                raise error(f"{where}: bool tensor {entry.name!r} holds values other than 0 and 1")
            tensors[entry.name] = storage.view(getattr(torch, entry.dtype)).reshape(entry.shape)
        if handle.read(1):
            raise error(f"{where} grew while it was read")
    finally:
        if hasher is not None:
            hasher.close()  # every byte read is hashed before the caller looks at the digest
    return tensors


class _Hasher:
    """Updates ``digest`` on its own thread with the chunks handed to ``update``, in order."""

    def __init__(self, digest):
        self._digest, self._failure = digest, None
        self._chunks: queue.Queue = queue.Queue(maxsize=_IN_FLIGHT)
        self._thread = threading.Thread(target=self._run, name="tensorcode-sha256", daemon=True)
        self._thread.start()

    def update(self, chunk) -> None:
        self._chunks.put(chunk)

    def close(self) -> None:
        self._chunks.put(None)
        self._thread.join()
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            if self._failure is None:
                try:
                    self._digest.update(chunk)
                except Exception as exc:  # noqa: BLE001 - re-raised by close() in the reading thread
                    self._failure = exc


def _entry(name: str, info, error: type[Exception], where: str) -> Entry:
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise error(f"{where}: header entry {name!r} must hold exactly dtype, shape and data_offsets")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str) or code not in _NAMES:
        raise error(f"{where}: tensor {name!r} has unknown dtype {str(code)[:40]!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMENSIONS
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        or math.prod(max(d, 1) for d in shape) > _MAX_ELEMENTS
    ):
        raise error(f"{where}: tensor {name!r} has an invalid shape")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise error(f"{where}: tensor {name!r} has invalid data offsets")
    if offsets[1] - offsets[0] != math.prod(shape) * _SIZES[code]:
        raise error(f"{where}: tensor {name!r} of shape {shape} {code} does not fill its {offsets[1] - offsets[0]} "
                    "bytes")
    return Entry(name, _NAMES[code], shape, offsets[0], offsets[1])
