"""Read-only access to where experiments live: local paths directly, URIs through pyarrow.fs.

Local paths use `os` because importing pyarrow.fs alone costs ~0.3 s and ~90 MB; anything with
a scheme (`s3://`, `gs://`, `file://`, ...) goes through `pyarrow.fs.FileSystem.from_uri`, the
way Ray itself opens `storage_path`. Nothing here ever writes.
"""

from __future__ import annotations

from ray_doctor.storage._base import Entry, Storage, StorageError
from ray_doctor.storage._local import LocalStorage


def is_uri(path: str) -> bool:
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.replace("+", "").replace("-", "").isalnum() and len(scheme) > 1


def shown_target(target: str) -> str:
    """A target as reports may show it: URIs lose their query (endpoints) and credentials."""
    if not is_uri(target):
        return target
    from ray_doctor.storage._arrow import shown_uri

    return shown_uri(target)


def open_storage(path: str) -> tuple[Storage, str]:
    """Return the storage that holds `path` and the path in that storage's terms."""
    if is_uri(path):
        from ray_doctor.storage._arrow import ArrowStorage

        return ArrowStorage.from_uri(path)
    storage = LocalStorage()
    return storage, storage.normalize(path)


def storage_for_filesystem(filesystem, path: str) -> Storage:
    """The storage behind a pyarrow filesystem Ray handed over (a run's `storage_filesystem`):
    local disks through `os`, anything else through the filesystem itself."""
    if filesystem.type_name == "local":
        return LocalStorage()
    from ray_doctor.storage._arrow import ArrowStorage

    return ArrowStorage.from_filesystem(filesystem, path)


__all__ = [
    "Entry",
    "LocalStorage",
    "Storage",
    "StorageError",
    "is_uri",
    "open_storage",
    "shown_target",
    "storage_for_filesystem",
]
