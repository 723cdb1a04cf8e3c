"""safetensors files: an 8-byte header length, a JSON header, then the tensors' bytes.

The header is checked the way the reference implementation does (sizes, dtypes, offsets that
tile the data buffer exactly); nothing else in the file can run code.
"""

from __future__ import annotations

import json
import math
import struct

from ray_doctor.checkpoint._model import FileResult, Tensor
from ray_doctor.storage import Storage, StorageError

MAX_HEADER = 100 * 1024 * 1024  # safetensors' own HeaderTooLarge limit
DTYPE_SIZES = {
    "F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1),
    "U64": ("uint64", 8), "U32": ("uint32", 4), "U16": ("uint16", 2), "U8": ("uint8", 1),
    "BOOL": ("bool", 1), "F8_E4M3": ("float8_e4m3fn", 1), "F8_E5M2": ("float8_e5m2", 1),
    "C64": ("complex64", 8),
}  # fmt: skip


def looks_like(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 0 < length <= min(MAX_HEADER, size - 8) and head[8:9] == b"{"


def analyse(storage: Storage, result: FileResult) -> None:
    result.format = "safetensors"
    try:
        head = storage.read_range(result.raw_path, 0, 8)
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER or 8 + length > result.size:
            result.problem("checkpoint-corrupt", f"header length {length} exceeds the file")
            return
        header = json.loads(storage.read_range(result.raw_path, 8, length))
    except StorageError as exc:
        result.problem("checkpoint-corrupt", f"cannot read: {exc.reason}")
        return
    except (ValueError, struct.error, UnicodeDecodeError, RecursionError) as exc:
        result.problem("checkpoint-corrupt", f"header is not valid JSON: {exc}")
        return
    if not isinstance(header, dict):
        result.problem("checkpoint-corrupt", "header is not a JSON object")
        return
    buffer = result.size - 8 - length
    base = 8 + length
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        problem = _check_entry(name, entry, buffer)
        if problem:
            result.problem("checkpoint-corrupt", problem)
            continue
        dtype, _ = DTYPE_SIZES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        spans.append((begin, end, name))
        shape = tuple(entry["shape"])
        result.tensors.append(
            Tensor(name, dtype, shape, (result.raw_path, None, base + begin, end - begin))
        )
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            kind = "overlaps the previous tensor" if begin < position else "leaves a gap before it"
            result.problem("checkpoint-corrupt", f"tensor {name} starts at {begin}: it {kind}")
        position = max(position, end)
    if not result.problems and position != buffer:
        result.problem(
            "checkpoint-corrupt",
            f"tensors cover {position} bytes but the data buffer holds {buffer} "
            "(truncated or padded file)",
        )


def _check_entry(name: str, entry: object, buffer: int) -> str | None:
    if not isinstance(entry, dict):
        return f"tensor {name}: header entry is not an object"
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        return f"tensor {name}: unknown dtype {dtype!r}"
    if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
        return f"tensor {name}: bad shape {shape!r}"
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        return f"tensor {name}: bad data_offsets {offsets!r}"
    expected = math.prod(shape) * DTYPE_SIZES[dtype][1]
    if offsets[1] - offsets[0] != expected:
        return f"tensor {name}: {offsets[1] - offsets[0]} bytes for shape {shape} {dtype} (needs {expected})"
    if offsets[1] > buffer:
        return (
            f"tensor {name}: ends at {offsets[1]}, past the {buffer}-byte data buffer (truncated)"
        )
    return None
