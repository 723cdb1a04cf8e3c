from __future__ import annotations

import io
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import NamedTuple

CHUNK_SIZE = 4 * 1024 * 1024


class StorageError(Exception):
    """A path could not be listed or read; `reason` is one line a user can act on."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class Entry(NamedTuple):
    """A listed file or dir. A tuple, not a dataclass: thousands are made per scan."""

    name: str
    path: str
    is_dir: bool
    size: int | None = None
    mtime: float | None = None
    is_file: bool = True  # False for dirs and for FIFOs, sockets, devices: never opened


class Storage(ABC):
    """The read-only operations scanners need. Paths are '/'-separated storage paths."""

    @abstractmethod
    def list_dir(self, path: str) -> list[Entry]:
        """Entries directly under `path`, sorted by name. Raises StorageError."""

    @abstractmethod
    def stat(self, path: str) -> Entry | None:
        """The entry at `path`, or None when nothing is there. Raises StorageError."""

    def list_tree(self, path: str) -> dict[str, list[Entry]] | None:
        """Every dir below `path` mapped to its entries, from one recursive listing, where the
        storage lists a whole tree in a few requests (object stores). None where listing dir by
        dir costs no more (a local disk), and callers list each dir as they read it."""
        return None

    @abstractmethod
    def iter_chunks(self, path: str, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Stream a regular file's bytes. Raises StorageError."""

    @abstractmethod
    def display(self, path: str) -> str:
        """How the path is shown in reports (a URI for remote storage)."""

    def join(self, *parts: str) -> str:
        return posixpath.join(*parts)

    def why_missing(self, path: str) -> str:
        """Why `stat(path)` found nothing, in words for the user."""
        return "no such file or directory"

    def path_of(self, shown: str) -> str:
        """The storage path behind a `display()` path (reports and the model keep those)."""
        return shown

    @abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Read up to `length` bytes at `offset` of a regular file. Raises StorageError."""

    def open_random(self, path: str, size: int) -> RandomAccessFile:
        """A read-only, seekable file object over `path` (for zip central directories)."""
        return RandomAccessFile(self, path, size)

    def read_bytes(self, path: str, limit: int) -> bytes:
        """Read at most `limit` bytes; raises StorageError when the file is larger."""
        out = bytearray()
        for chunk in self.iter_chunks(path):
            out += chunk
            if len(out) > limit:
                raise StorageError(self.display(path), f"larger than {limit // 2**20} MiB")
        return bytes(out)

    def iter_lines(self, path: str, max_line: int = 1 << 20) -> Iterator[bytes]:
        """Stream lines (without the newline). Overlong lines are cut to `max_line` bytes."""
        carry = b""
        skipping = False
        for chunk in self.iter_chunks(path):
            parts = (carry + chunk).split(b"\n")
            carry = parts.pop()
            for part in parts:
                if skipping:
                    skipping = False
                    continue
                yield part
            if len(carry) > max_line:
                if not skipping:
                    yield carry[:max_line]
                skipping = True
                carry = b""
        if carry and not skipping:
            yield carry


class RandomAccessFile(io.RawIOBase):
    """Seekable reads through `Storage.read_range`, so zipfile can parse local and remote
    archives alike. Read-only by construction."""

    def __init__(self, storage: Storage, path: str, size: int) -> None:
        self._storage = storage
        self._path = path
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._pos
        size = max(0, min(size, self._size - self._pos))
        if not size:
            return b""
        try:
            data = self._storage.read_range(self._path, self._pos, size)
        except StorageError as exc:
            raise OSError(exc.reason) from None
        self._pos += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
