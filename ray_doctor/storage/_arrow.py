from __future__ import annotations

import posixpath
from collections.abc import Iterator

from ray_doctor.storage._base import CHUNK_SIZE, Entry, Storage, StorageError


class ArrowStorage(Storage):
    """Any URI `pyarrow.fs.FileSystem.from_uri` accepts: s3://, gs://, hdfs://, file://, ..."""

    def __init__(self, filesystem, scheme: str, base_uri: str, base_path: str) -> None:
        self._fs = filesystem
        self._scheme = scheme
        self._base_uri = base_uri.rstrip("/")
        self._base_path = base_path.rstrip("/")

    @classmethod
    def from_uri(cls, uri: str) -> tuple[ArrowStorage, str]:
        import pyarrow.fs as pafs

        try:
            filesystem, path = pafs.FileSystem.from_uri(uri)
        except Exception as exc:  # ArrowInvalid, OSError from credential / region lookup
            raise StorageError(uri, _one_line(exc)) from None
        scheme = uri.partition("://")[0]
        return cls(filesystem, scheme, uri, path), path.rstrip("/") or path

    def display(self, path: str) -> str:
        if path.startswith(self._base_path):
            return self._base_uri + path[len(self._base_path) :]
        return f"{self._scheme}://{path.lstrip('/')}"

    def join(self, *parts: str) -> str:
        return posixpath.join(*parts)

    def _entry(self, info) -> Entry:
        import pyarrow.fs as pafs

        mtime = info.mtime.timestamp() if info.mtime is not None else None
        is_dir = info.type == pafs.FileType.Directory
        return Entry(
            name=info.base_name,
            path=info.path,
            is_dir=is_dir,
            size=info.size if not is_dir else None,
            mtime=mtime,
            is_file=info.type == pafs.FileType.File,
        )

    def stat(self, path: str) -> Entry | None:
        import pyarrow.fs as pafs

        try:
            info = self._fs.get_file_info(path)
        except Exception as exc:
            raise StorageError(self.display(path), _one_line(exc)) from None
        if info.type == pafs.FileType.NotFound:
            return None
        return self._entry(info)

    def list_dir(self, path: str) -> list[Entry]:
        import pyarrow.fs as pafs

        try:
            infos = self._fs.get_file_info(pafs.FileSelector(path, recursive=False))
        except Exception as exc:
            raise StorageError(self.display(path), _one_line(exc)) from None
        return sorted((self._entry(i) for i in infos), key=lambda e: e.name)

    def iter_chunks(self, path: str, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        try:
            stream = self._fs.open_input_stream(path)
        except Exception as exc:
            raise StorageError(self.display(path), _one_line(exc)) from None
        with stream:
            while True:
                try:
                    chunk = stream.read(chunk_size)
                except Exception as exc:
                    raise StorageError(self.display(path), _one_line(exc)) from None
                if not chunk:
                    return
                yield bytes(chunk)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        try:
            with self._fs.open_input_file(path) as handle:
                return bytes(handle.read_at(length, offset))
        except Exception as exc:
            raise StorageError(self.display(path), _one_line(exc)) from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
