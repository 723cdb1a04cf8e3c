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
    if counted_dtype(tensor) is None:
        return 0
    path, member_name, offset, length = tensor.location
    if member_name is not None:
        member = (members or {}).get(member_name)
        if member is None or member.method != 0:
            return 0
        start = _zip.data_offset(storage, path, member) + offset
    else:
        start = offset
    counter = NonfiniteCounter(tensor.dtype, start, length)
    chunk = CHUNK - CHUNK % 16  # whole elements of every dtype
    for position in range(start, start + length, chunk):
        counter.feed(
            position, storage.read_range(path, position, min(chunk, start + length - position))
        )
    return counter.count


def counted_dtype(tensor: Tensor) -> str | None:
    """The dtype whose values are counted, or None (not a float, or its bytes unknown)."""
    if tensor.location is None or (tensor.dtype not in FLOATS and tensor.dtype != "bfloat16"):
        return None
    return tensor.dtype


class NonfiniteCounter:
    """NaN / Inf among the elements of bytes [start, start + length) of a stream fed to it in
    order, in pieces of any size: an element cut by a piece's end is carried to the next.
    The CRC pass over a remote zip feeds its members' bytes here as it reads them, so each
    byte crosses the network once."""

    def __init__(self, dtype: str, start: int, length: int) -> None:
        import numpy as np  # only when values are checked

        self._np = np
        self._bfloat16 = dtype == "bfloat16"
        self._view = "<u2" if self._bfloat16 else FLOATS[dtype]
        self._itemsize = np.dtype(self._view).itemsize
        self._next, self._end = start, start + length
        self._carry = b""
        self.count = 0

    def feed(self, position: int, data: bytes) -> None:
        """`data` holds the stream's bytes from `position` on."""
        low, high = max(position, self._next), min(position + len(data), self._end)
        if high <= low:
            return
        piece = memoryview(data)[low - position : high - position]  # no copy of the chunk
        if self._carry:
            piece = memoryview(self._carry + piece)
        self._next = high
        usable = len(piece) - len(piece) % self._itemsize
        self._carry = bytes(piece[usable:])
        values = self._np.frombuffer(piece, dtype=self._view, count=usable // self._itemsize)
        if self._bfloat16:
            self.count += int(self._np.count_nonzero((values & 0x7F80) == 0x7F80))
        else:
            self.count += int(values.size - self._np.count_nonzero(self._np.isfinite(values)))
