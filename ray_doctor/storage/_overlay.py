"""Two storages seen as one: what a running Ray driver has staged locally over what it has
already synced to the experiment's storage.

A Tune driver writes a trial's `error.txt`, `result.json` and the experiment state into a
local staging dir (`/tmp/ray/session_*/artifacts/.../driver_artifacts`) and uploads them to the
storage_path later; workers upload checkpoints straight to the storage_path. A callback that
diagnoses the moment a trial fails reads both: the staged copy of a file wins, a dir lists what
either holds. Paths and displays are the storage's, so reports name where the files will be.
Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterator

from ray_doctor.storage._base import CHUNK_SIZE, Entry, Storage, StorageError


class OverlayStorage(Storage):
    def __init__(self, staged: Storage, staged_root: str, synced: Storage, synced_root: str):
        self._staged = staged
        self._staged_root = staged_root.rstrip("/")
        self._synced = synced
        self._synced_root = synced_root.rstrip("/")

    def _staged_path(self, path: str) -> str | None:
        """`path` (a synced-storage path) in the staging dir, or None outside the experiment."""
        if path == self._synced_root:
            return self._staged_root
        prefix = self._synced_root + "/"
        if path.startswith(prefix):
            return self._staged.join(self._staged_root, path[len(prefix) :])
        return None

    def _as_synced(self, entry: Entry, parent: str) -> Entry:
        return entry._replace(path=self._synced.join(parent, entry.name))

    def _staged_stat(self, path: str) -> Entry | None:
        staged = self._staged_path(path)
        if staged is None:
            return None
        try:
            return self._staged.stat(staged)
        except StorageError:
            return None

    def stat(self, path: str) -> Entry | None:
        entry = self._staged_stat(path)
        if entry is not None:
            return entry._replace(path=path)
        return self._synced.stat(path)

    def list_dir(self, path: str) -> list[Entry]:
        merged: dict[str, Entry] = {}
        failure: StorageError | None = None
        try:
            merged = {e.name: e for e in self._synced.list_dir(path)}
        except StorageError as exc:  # not synced yet: the staged copy may still be there
            failure = exc
        staged = self._staged_path(path)
        found_staged = False
        if staged is not None:
            try:
                for entry in self._staged.list_dir(staged):
                    merged[entry.name] = self._as_synced(entry, path)
                found_staged = True
            except StorageError:
                pass
        if failure is not None and not found_staged:
            raise failure
        return sorted(merged.values(), key=lambda e: e.name)

    def _reader(self, path: str) -> tuple[Storage, str]:
        staged = self._staged_path(path)
        if staged is not None and self._staged_stat(path) is not None:
            return self._staged, staged
        return self._synced, path

    def iter_chunks(self, path: str, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        storage, real = self._reader(path)
        return storage.iter_chunks(real, chunk_size)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        storage, real = self._reader(path)
        return storage.read_range(real, offset, length)

    def display(self, path: str) -> str:
        return self._synced.display(path)

    def join(self, *parts: str) -> str:
        return self._synced.join(*parts)

    def path_of(self, shown: str) -> str:
        return self._synced.path_of(shown)

    def why_missing(self, path: str) -> str:
        return self._synced.why_missing(path)
