from __future__ import annotations

import errno
import os
import stat as stat_mod
from collections.abc import Iterator

from ray_doctor.storage._base import CHUNK_SIZE, Entry, Storage, StorageError


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    if exc.errno == errno.ENOTDIR:
        return "not a directory"
    if exc.errno == errno.EISDIR:
        return "is a directory"
    return exc.strerror or str(exc)


def printable(path: str) -> str:
    """Make a path with undecodable bytes safe to print and to put in JSON."""
    if path.isascii():
        return path
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class LocalStorage(Storage):
    """The local filesystem, through `os`. Follows symlinks; never opens non-regular files."""

    def normalize(self, path: str) -> str:
        return os.path.abspath(os.path.expanduser(path))

    def display(self, path: str) -> str:
        return printable(path)

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def _entry(self, path: str, name: str, st: os.stat_result) -> Entry:
        is_dir = stat_mod.S_ISDIR(st.st_mode)
        return Entry(
            name=printable(name),  # for display; `path` keeps the real bytes for access
            path=path,
            is_dir=is_dir,
            size=st.st_size,
            mtime=st.st_mtime,
            is_file=stat_mod.S_ISREG(st.st_mode),
        )

    def stat(self, path: str) -> Entry | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(self.display(path), _reason(exc)) from None
        return self._entry(path, os.path.basename(path.rstrip(os.sep)) or path, st)

    def list_dir(self, path: str) -> list[Entry]:
        """Entries from the dir's own type info: no stat per entry (size and mtime stay None;
        `stat()` has them). Symlinks are followed; loops and dangling links are not files."""
        entries = []
        try:
            with os.scandir(path) as it:
                for item in it:
                    try:
                        is_dir = item.is_dir()
                        is_file = not is_dir and item.is_file()
                    except OSError:
                        is_dir = is_file = False
                    entries.append(
                        Entry(printable(item.name), item.path, is_dir, None, None, is_file)
                    )
        except OSError as exc:
            raise StorageError(self.display(path), _reason(exc)) from None
        entries.sort(key=lambda e: e.name)
        return entries

    def iter_chunks(self, path: str, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise StorageError(self.display(path), _reason(exc)) from None
        try:
            st = os.fstat(fd)
            if not stat_mod.S_ISREG(st.st_mode):
                kind = "a directory" if stat_mod.S_ISDIR(st.st_mode) else "not a regular file"
                raise StorageError(self.display(path), kind)
            while True:
                try:
                    chunk = os.read(fd, chunk_size)
                except OSError as exc:
                    raise StorageError(self.display(path), _reason(exc)) from None
                if not chunk:
                    return
                yield chunk
        finally:
            os.close(fd)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise StorageError(self.display(path), _reason(exc)) from None
        try:
            if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
                raise StorageError(self.display(path), "not a regular file")
            parts = []
            while length > 0:
                chunk = os.pread(fd, min(length, CHUNK_SIZE), offset)
                if not chunk:
                    break
                parts.append(chunk)
                offset += len(chunk)
                length -= len(chunk)
            return b"".join(parts)
        except OSError as exc:
            raise StorageError(self.display(path), _reason(exc)) from None
        finally:
            os.close(fd)
