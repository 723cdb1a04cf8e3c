from __future__ import annotations

import os
import posixpath
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator

from ray_doctor.storage._base import CHUNK_SIZE, Entry, Storage, StorageError

# Every S3 request is bounded, so a silent or unreachable endpoint costs seconds, not a hang.
# The request timeout is curl's low-speed limit on Linux (abort after this long without a
# byte), so a large file on a slow link still downloads. RAY_DOCTOR_S3_TIMEOUT_S overrides it.
# Google Cloud Storage retries a failing request for up to 15 minutes by default (a machine
# off GCE with no credentials waits that long for the metadata server): the same number of
# seconds bounds its retrying, unless the URI sets retry_limit_seconds itself.
S3_CONNECT_TIMEOUT_S = 5.0
S3_REQUEST_TIMEOUT_S = 20.0
S3_ATTEMPTS = 3
TIMEOUT_ENV = "RAY_DOCTOR_S3_TIMEOUT_S"

# curl / AWS SDK failures that mean the endpoint is gone, not that one object is unreadable.
_UNREACHABLE = re.compile(
    r"NETWORK_CONNECTION|(?:curlCode: |CURL error \[)(?:5|6|7|28|35|52|55|56)\b|"
    r"Could not connect|Couldn't connect|Could not create a OAuth2 access token"
)
_CURL_REASON = {
    "6": "cannot resolve the endpoint's host name",
    "7": "cannot connect to the endpoint (is it running, is the port right?)",
    "28": "the endpoint did not answer in time",
    "35": "TLS handshake with the endpoint failed (scheme=http for a plain-HTTP endpoint?)",
    "52": "the endpoint closed the connection without answering",
    "56": "the connection to the endpoint broke",
}
_AWS_REASON = {
    "ACCESS_DENIED": "access denied (HTTP 403): check the credentials (AWS_ACCESS_KEY_ID, "
    "AWS_SECRET_ACCESS_KEY or AWS_PROFILE) and the bucket's policy",
    "INVALID_ACCESS_KEY_ID": "the access key is not known to the endpoint (HTTP 403): check "
    "AWS_ACCESS_KEY_ID / AWS_PROFILE",
    "SIGNATURE_DOES_NOT_MATCH": "the secret key does not match the access key (HTTP 403): "
    "check AWS_SECRET_ACCESS_KEY",
    "NO_SUCH_BUCKET": "the bucket does not exist",
    "EXPIRED_TOKEN": "the session token has expired: refresh the credentials",
}
# google-cloud-cpp's words when no credentials could be had (no GOOGLE_APPLICATION_CREDENTIALS
# and no GCE metadata server): the request was never sent, so the endpoint is not the problem.
_GCS_NO_TOKEN = "Could not create a OAuth2 access token"
_GCS_NO_TOKEN_REASON = (
    "no Google Cloud credentials: set GOOGLE_APPLICATION_CREDENTIALS to a service-account key "
    "file, or run where the GCE metadata server answers"
)


class ArrowStorage(Storage):
    """Any URI `pyarrow.fs.FileSystem.from_uri` accepts: s3://, gs://, hdfs://, file://, ..."""

    def __init__(self, filesystem, scheme: str, base_uri: str, base_path: str) -> None:
        self._fs = filesystem
        self._scheme = scheme
        self._base_uri = shown_uri(base_uri).rstrip("/")
        self._base_path = base_path.rstrip("/")
        # Set by the first request that finds the endpoint unreachable: later requests fail at
        # once with the same reason instead of each waiting out its own timeouts.
        self._unreachable: str | None = None
        self._lock = threading.Lock()
        self._open_files: OrderedDict[str, _ReadAhead] = OrderedDict()

    @classmethod
    def from_uri(cls, uri: str) -> tuple[ArrowStorage, str]:
        import pyarrow.fs as pafs

        shown = shown_uri(uri)
        try:
            # pyarrow parses the URI exactly as Ray does: query options (endpoint_override,
            # scheme, region, ...), user:secret@ credentials, AWS_* variables.
            filesystem, path = pafs.FileSystem.from_uri(uri)
            filesystem = _bounded(filesystem)
        except Exception as exc:  # ArrowInvalid, OSError from credential / region lookup
            raise StorageError(shown, _reason(exc)) from None
        scheme = uri.partition("://")[0]
        return cls(filesystem, scheme, uri, path), path.rstrip("/") or path

    @classmethod
    def from_filesystem(cls, filesystem, path: str) -> ArrowStorage:
        """A pyarrow filesystem Ray already holds (a run's own storage filesystem, which may be
        a custom one that no URI names); reports show `<type>://path`."""
        scheme = {"gcs": "gs"}.get(filesystem.type_name, filesystem.type_name)
        return cls(filesystem, scheme, f"{scheme}://{path.lstrip('/')}", path)

    def display(self, path: str) -> str:
        if path.startswith(self._base_path):
            return self._base_uri + path[len(self._base_path) :]
        return f"{self._scheme}://{path.lstrip('/')}"

    def path_of(self, shown: str) -> str:
        if shown.startswith(self._base_uri):
            return self._base_path + shown[len(self._base_uri) :]
        return shown.partition("://")[2] if "://" in shown else shown

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

    def _failed(self, path: str, exc: BaseException) -> StorageError:
        """The StorageError for a failed request; remembers an unreachable endpoint."""
        reason = _reason(exc)
        if _UNREACHABLE.search(str(exc)):
            with self._lock:
                self._unreachable = self._unreachable or reason
        return StorageError(self.display(path), reason)

    def _check_reachable(self, path: str) -> None:
        if self._unreachable is not None:
            raise StorageError(self.display(path), f"not read: {self._unreachable}")

    def stat(self, path: str) -> Entry | None:
        import pyarrow.fs as pafs

        self._check_reachable(path)
        try:
            info = self._fs.get_file_info(path)
        except Exception as exc:
            raise self._failed(path, exc) from None
        if info.type == pafs.FileType.NotFound:
            return None
        return self._entry(info)

    def why_missing(self, path: str) -> str:
        """On object stores the first path component is the bucket: say when that is what is
        missing (one more request, made only once the target was not found)."""
        bucket = path.strip("/").split("/", 1)[0]
        if self._scheme in ("s3", "gs", "gcs") and bucket and bucket != path.strip("/"):
            try:
                if self.stat(bucket) is None:
                    return f"the bucket {bucket!r} does not exist"
            except StorageError as exc:
                return exc.reason
        elif self._scheme in ("s3", "gs", "gcs") and bucket:
            return "the bucket does not exist"
        return "no such file or directory"

    def list_dir(self, path: str) -> list[Entry]:
        return sorted(self._list(path, recursive=False), key=lambda e: e.name)

    def list_tree(self, path: str) -> dict[str, list[Entry]]:
        """One recursive listing (object stores page through every key below `path`, a
        thousand a request) grouped by parent dir: no request per dir."""
        tree: dict[str, list[Entry]] = {}
        for entry in self._list(path, recursive=True):
            tree.setdefault(posixpath.dirname(entry.path), []).append(entry)
        for entries in tree.values():
            entries.sort(key=lambda e: e.name)
        return tree

    def _list(self, path: str, recursive: bool) -> list[Entry]:
        import pyarrow.fs as pafs

        self._check_reachable(path)
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(path, recursive=recursive))
        except Exception as exc:
            raise self._failed(path, exc) from None
        return [self._entry(i) for i in infos]

    def iter_chunks(self, path: str, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        self._check_reachable(path)
        try:
            # compression=None: bytes as stored, whatever the file's extension says.
            stream = self._fs.open_input_stream(path, compression=None)
        except Exception as exc:
            raise self._failed(path, exc) from None
        with stream:
            while True:
                try:
                    chunk = stream.read(chunk_size)
                except Exception as exc:
                    raise self._failed(path, exc) from None
                if not chunk:
                    return
                yield bytes(chunk)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Bytes of `path` from `offset`. The file stays open between calls (one HEAD for its
        size, not one per read) and each GET reads ahead (`READ_AHEAD`), the file's end in one
        GET of its own (`TAIL`): a checkpoint's central directory, local headers and members
        are read in a few large ranged GETs, not one request pair per chunk."""
        self._check_reachable(path)
        try:
            return self._remote_file(path).read(offset, length)
        except Exception as exc:
            raise self._failed(path, exc) from None

    def _remote_file(self, path: str) -> _ReadAhead:
        with self._lock:
            cached = self._open_files.pop(path, None)
            if cached is None:
                cached = _ReadAhead(self._fs.open_input_file(path))
            self._open_files[path] = cached  # most recent last
            while len(self._open_files) > OPEN_FILES:
                _, oldest = self._open_files.popitem(last=False)
                oldest.close()
            return cached


# Ranged reads of one file: each GET fetches at least this much, kept for the next reads.
READ_AHEAD = 64 * 1024 * 1024
# A file's last bytes (a zip's end record and central directory) come in one GET and are kept
# apart from the read-ahead block: zipfile's few small reads there cost one request, and
# reading the directory between two passes over the members does not drop their block.
TAIL = 1024 * 1024
OPEN_FILES = 4  # files kept open (and their read-ahead blocks) at once


class _ReadAhead:
    """An open remote file with one read-ahead block and its tail; safe to share between
    threads."""

    def __init__(self, handle) -> None:
        self._handle = handle
        self._lock = threading.Lock()
        self._size: int | None = None
        self._start = 0
        self._block = b""
        self._tail_start = -1  # no tail fetched yet
        self._tail = b""

    def read(self, offset: int, length: int) -> bytes:
        with self._lock:
            if self._size is None:
                self._size = self._handle.size()
            end = min(offset + length, self._size)
            if end <= offset:
                return b""
            if offset >= self._size - TAIL:
                if self._tail_start < 0:
                    self._tail_start = max(0, self._size - TAIL)
                    self._tail = self._fetch(self._tail_start, self._size - self._tail_start)
                return self._tail[offset - self._tail_start : end - self._tail_start]
            block_end = self._start + len(self._block)
            if self._start <= offset < block_end:
                if end <= block_end:
                    return self._block[offset - self._start : end - self._start]
                # A read across the block's end (members are read in chunks that do not line
                # up with blocks): fetch on from the block's end, not its bytes again.
                head = self._block[offset - self._start :]
                self._load(block_end, end - block_end)
                return head + self._block[: end - block_end]
            self._load(offset, end - offset)
            return self._block[: end - offset]

    def _load(self, offset: int, need: int) -> None:
        want = min(max(need, READ_AHEAD), self._size - offset)
        self._start, self._block = offset, self._fetch(offset, want)

    def _fetch(self, offset: int, length: int) -> bytes:
        return bytes(self._handle.read_at(length, offset))

    def close(self) -> None:
        with self._lock:
            self._block = self._tail = b""
            self._handle.close()


def _bounded(filesystem):
    """An S3 filesystem with the same options plus ray-doctor's timeouts and retries.

    pyarrow's URI syntax has no timeout options, so the filesystem from_uri built is copied
    through its pickling state (every option it parsed, credentials left to the provider
    chain when none were given) with the bounds added.
    """
    import datetime

    import pyarrow.fs as pafs

    if _is_gcs(filesystem):
        rebuild, (options,) = filesystem.__reduce__()
        if options.get("retry_time_limit") is None:
            options["retry_time_limit"] = datetime.timedelta(seconds=_timeout_from_env())
        return rebuild(options)
    if not isinstance(filesystem, pafs.S3FileSystem):
        return filesystem
    rebuild, (options,) = filesystem.__reduce__()
    request_timeout = _timeout_from_env()
    options.update(
        connect_timeout=min(S3_CONNECT_TIMEOUT_S, request_timeout),
        request_timeout=request_timeout,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS),
    )
    return rebuild(options)


def _is_gcs(filesystem) -> bool:
    # pyarrow.fs.GcsFileSystem is absent from builds without GCS support.
    return getattr(filesystem, "type_name", "") == "gcs"


def _timeout_from_env() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text)
    except ValueError:
        return S3_REQUEST_TIMEOUT_S
    return value if value > 0 else S3_REQUEST_TIMEOUT_S


def shown_uri(uri: str) -> str:
    """The URI as reports show it: no query options (endpoints, regions) and no
    `key:secret@` credentials."""
    scheme, sep, rest = uri.split("?", 1)[0].partition("://")
    authority, slash, path = rest.partition("/")
    return scheme + sep + authority.rpartition("@")[2] + slash + path


_AWS_ERROR = re.compile(r"AWS Error (?P<kind>[A-Z_]+)(?: \(HTTP status (?P<status>\d+)\))?")
_CURL_CODE = re.compile(r"curlCode: (\d+)|CURL error \[(\d+)\]")


def _reason(exc: BaseException) -> str:
    """One line a user can act on, from pyarrow's (often multi-clause) error text."""
    text = str(exc).strip()
    if _GCS_NO_TOKEN in text:
        return _GCS_NO_TOKEN_REASON
    curl = _CURL_CODE.search(text)
    code = curl and (curl[1] or curl[2])
    if code in _CURL_REASON:
        return _CURL_REASON[code]
    aws = _AWS_ERROR.search(text)
    if aws and aws["kind"] in _AWS_REASON:
        return _AWS_REASON[aws["kind"]]
    for marker, reason in (
        ("InvalidAccessKeyId", _AWS_REASON["INVALID_ACCESS_KEY_ID"]),
        ("SignatureDoesNotMatch", _AWS_REASON["SIGNATURE_DOES_NOT_MATCH"]),
        ("NoSuchBucket", _AWS_REASON["NO_SUCH_BUCKET"]),
        ("HTTP status 403", _AWS_REASON["ACCESS_DENIED"]),
    ):
        if marker in text:
            return reason
    lines = text.splitlines()
    return lines[0] if lines else type(exc).__name__
