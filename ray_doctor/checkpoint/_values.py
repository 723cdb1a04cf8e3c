"""Count NaN / Inf in tensors by reading their raw bytes: no unpickler, no torch.

The structure pass located each tensor's bytes (a zip member or a safetensors span); here they
are read in chunks and viewed as numbers with numpy. bfloat16, which numpy lacks, is checked on
its bit pattern (exponent all ones).
"""

from __future__ import annotations

from ray_doctor.checkpoint import _zip
from ray_doctor.checkpoint._model import Tensor
from ray_doctor.storage import Storage

CHUNK = 16 * 1024 * 1024
FLOATS = {
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
    "complex64": "<f4",
    "complex128": "<f8",
}


def nonfinite(
    storage: Storage, tensor: Tensor, members: dict[str, _zip.Member] | None = None
) -> int:
    """How many elements of `tensor` are NaN or infinite (0 for non-float dtypes)."""
    if tensor.location is None or (tensor.dtype not in FLOATS and tensor.dtype != "bfloat16"):
        return 0
    import numpy as np  # only when values are checked

    path, member_name, offset, length = tensor.location
    if member_name is not None:
        member = (members or {}).get(member_name)
        if member is None or member.method != 0:
            return 0
        start = _zip.data_offset(storage, path, member) + offset
    else:
        start = offset
    if tensor.dtype == "bfloat16":
        itemsize, view = 2, "<u2"
    else:
        view = FLOATS[tensor.dtype]
        itemsize = np.dtype(view).itemsize
    bad = 0
    chunk = CHUNK - CHUNK % itemsize
    for position in range(0, length, chunk):
        data = storage.read_range(path, start + position, min(chunk, length - position))
        usable = len(data) - len(data) % itemsize
        values = np.frombuffer(data[:usable], dtype=view)
        if tensor.dtype == "bfloat16":
            bad += int(np.count_nonzero((values & 0x7F80) == 0x7F80))
        else:
            bad += int(values.size - np.count_nonzero(np.isfinite(values)))
    return bad
