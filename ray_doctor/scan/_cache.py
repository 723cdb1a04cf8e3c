"""What one scan read, kept for the next: `inspect --watch` re-reads only what changed.

A trial dir is read again only when one of its files changed size or mtime (result.json
grew, error.txt appeared, a checkpoint dir came or went); the experiment state only when the
driver rewrote it. Everything else is handed back from the previous pass.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray_doctor.model import ScanError, Trial
from ray_doctor.storage import Entry, Storage, StorageError

Fingerprint = tuple[tuple[str, bool, int | None, float | None], ...]


@dataclass
class ScanCache:
    trials: dict[str, tuple[Fingerprint, Trial | None, list[ScanError]]] = field(
        default_factory=dict
    )
    states: dict[str, tuple[Fingerprint, Any]] = field(default_factory=dict)
    read: int = 0  # trial dirs and state files read in the current pass
    reused: int = 0  # ... and handed back unchanged from an earlier pass
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start_pass(self) -> None:
        self.read = self.reused = 0

    def _count(self, read: int = 0, reused: int = 0) -> None:
        with self._lock:  # remote trial dirs are read from a thread pool
            self.read += read
            self.reused += reused

    def trial(
        self,
        storage: Storage,
        path: str,
        entries: list[Entry],
        read: Callable[[], tuple[Trial | None, list[ScanError]]],
    ) -> tuple[Trial | None, list[ScanError]]:
        """The trial in dir `path`, read again only when its files changed."""
        fingerprint = fingerprint_of(storage, entries)
        cached = self.trials.get(path)
        if cached is not None and cached[0] == fingerprint:
            self._count(reused=1)
            return _fresh(cached[1]), list(cached[2])
        self._count(read=1)
        trial, errors = read()
        self.trials[path] = (fingerprint, _fresh(trial), list(errors))
        return trial, errors

    def state(self, storage: Storage, entry: Entry, read: Callable[[], Any]) -> Any:
        """A parsed experiment state, parsed again only when the file changed."""
        fingerprint = fingerprint_of(storage, [entry])
        cached = self.states.get(entry.path)
        if cached is not None and cached[0] == fingerprint:
            self._count(reused=1)
            return cached[1]
        self._count(read=1)
        value = read()
        self.states[entry.path] = (fingerprint, value)
        return value


def fingerprint_of(storage: Storage, entries: list[Entry]) -> Fingerprint:
    """Name, kind, size and mtime of each entry; stat()ed where the listing left them out
    (a local listing does, to stay fast when nothing is cached)."""
    items = []
    for entry in entries:
        size, mtime = entry.size, entry.mtime
        if entry.is_file and (size is None or mtime is None):
            try:
                found = storage.stat(entry.path)
            except StorageError:
                found = None
            if found is not None:
                size, mtime = found.size, found.mtime
        items.append((entry.name, entry.is_dir, size, mtime))
    return tuple(sorted(items))


def _fresh(trial: Trial | None) -> Trial | None:
    """A copy merging may change (status, config, last result) without touching the cache."""
    if trial is None:
        return None
    fresh = copy.copy(trial)
    fresh.history = copy.copy(trial.history)
    return fresh
