"""Files Ray writes whole, found cut off: the evidence of a writer killed or a full disk.

Ray writes experiment_state, params.json and the Train V2 snapshot as one JSON document each
and result.json one row per line. A document that does not end where JSON can end (its last
byte is not `}` or `]`), an empty one, or a last row with no newline were cut off mid-write.
"""

from __future__ import annotations

from ray_doctor.storage import Entry, Storage, StorageError

TAIL_BYTES = 64


def json_cut_off(storage: Storage, entry: Entry) -> int | None:
    """The size of a JSON document file that ends mid-write (0 when empty), else None."""
    size = entry.size
    if size is None:  # listings of local dirs leave sizes out; this runs only on a bad file
        try:
            found = storage.stat(entry.path)
        except StorageError:
            return None
        size = found.size if found is not None else None
    if size is None:
        return None
    if size == 0:
        return 0
    try:
        tail = storage.read_range(entry.path, max(0, size - TAIL_BYTES), min(size, TAIL_BYTES))
    except StorageError:
        return None
    stripped = tail.rstrip()
    if not stripped and size <= TAIL_BYTES:
        return 0  # nothing but whitespace: nothing was written
    return None if stripped.endswith((b"}", b"]")) else size
