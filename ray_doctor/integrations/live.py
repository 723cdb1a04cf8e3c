"""`ray-doctor inspect --address http://HEAD:8265 [--job ID]`: a live cluster or a Ray Job.

The job's driver log comes from the Jobs API (`JobSubmissionClient`); the session logs of
every alive node (raylet, the job's worker `.out` / `.err`, Train V2's `train/*.log`) come
from Ray's state API, each streamed with a cap on its bytes (the end of a file is kept: that is
where a failure is) and all of it within a time budget. They go through the same log readers
as `--logs`. When the job's output names where its experiment is stored, that is read too and
the logs are merged into it, as `inspect PATH --logs ...` would.

Authentication is Ray's own: the Jobs client and the headers of every state API request come
from Ray's token loader (`RAY_AUTH_MODE=token` with `RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH` or
`~/.ray/auth_token`). Ray is imported only here, only for `--address`.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ray_doctor.model import Layout, ScanError, ScanResult
from ray_doctor.scan import ScanFailure, scan
from ray_doctor.scan._logs import SESSION_LOG, LogResult, parse_log
from ray_doctor.scan._merge import log_experiment, merge_logs

MAX_FILE_BYTES = 8 * 1024 * 1024  # the end of each log file kept, at most
MAX_FILE_LINES = 200_000  # what the state API is asked for (it counts lines, not bytes)
MAX_NODE_FILES = 200  # files read per node, the newest first
DEFAULT_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0

# Where a job's output says its experiment lives (Tune's last lines, a V2 checkpoint's dir).
STORAGE_IN_OUTPUT = (
    re.compile(r"View detailed results here: (?P<path>\S+)"),
    re.compile(r"experiment state to '(?P<path>[^']+)'"),
    re.compile(r"Checkpoint\(filesystem=\w+, path=(?P<path>\S+?)/checkpoint_\d{4}-\d\d-\d\d_"),
)

Progress = Callable[[str, int, int], None]
REFUSED = (
    "refused the request (token authentication): set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN "
    "(or RAY_AUTH_TOKEN_PATH), as for `ray job`"
)


# How a refused token reads in the Jobs client's error: an HTTP 401 / 403 or its words.
REFUSAL = re.compile(r"(?i)\b(401|403)\b|unauthori[sz]ed|authentication")


class LiveFailure(Exception):
    """The cluster cannot be inspected (unreachable, no state API, no such job): one line."""


@dataclass(frozen=True)
class Job:
    submission_id: str
    job_id: str | None  # the driver's hex job id, once it started
    status: str
    entrypoint: str


def inspect_live(
    address: str,
    job: str | None = None,
    storage_path: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
) -> ScanResult:
    """Read a live cluster's job and logs into one ScanResult. Raises LiveFailure."""
    deadline = time.monotonic() + timeout_s
    base = address.rstrip("/")
    client = _jobs_client(base)
    chosen = _pick_job(client, base, job)
    found = LogResult()
    driver_text = _driver_log(client, chosen)
    driver_name = f"{base}/api/jobs/{chosen.submission_id}/logs"
    found.extend(parse_log(driver_text.splitlines(), "driver.log", driver_name))
    found.extend(_node_logs(base, chosen, deadline, progress))
    target = storage_path or storage_named_in(driver_text)
    result = _storage_result(target) if target else None
    if result is None:
        shown = f"job {chosen.submission_id} at {base}"
        result = ScanResult(shown, Layout.LOG)
        result.experiments.append(log_experiment(shown, f"job {chosen.submission_id}", found))
        if target:
            result.errors.append(_unreadable(target))
        return result
    merge_logs(result, found)
    return result


def storage_named_in(text: str) -> str | None:
    """The experiment dir a job's output names last (Tune prints it as the sweep ends)."""
    for pattern in STORAGE_IN_OUTPUT:
        matches = list(pattern.finditer(text))
        if matches:
            return matches[-1]["path"].rstrip("/.,")
    return None


def _storage_result(target: str) -> ScanResult | None:
    try:
        result = scan(target)
    except ScanFailure:
        return None
    return result if result.layout is not None else None


def _unreadable(target: str) -> ScanError:
    return ScanError(target, "named by the job's output, but not readable from this machine")


def _jobs_client(base: str):
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:  # a Ray without the Jobs client (ray[default])
        raise LiveFailure(
            f"--address needs Ray's job client (pip install 'ray[default]'): {exc}"
        ) from None
    try:
        return JobSubmissionClient(base)
    except Exception as exc:  # ConnectionError, a refused token, a non-Ray server
        # The address is left out of the text first: a port such as 34037 holds "403".
        if REFUSAL.search(str(exc).replace(base, "")):
            raise LiveFailure(f"the Ray dashboard at {base} {REFUSED}") from None
        raise LiveFailure(f"cannot reach the Ray dashboard at {base}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _pick_job(client, base: str, wanted: str | None) -> Job:
    try:
        listed = sorted(client.list_jobs(), key=lambda details: details.start_time or 0)
        jobs = [_job(details) for details in listed]
    except Exception as exc:
        raise LiveFailure(f"cannot list the jobs of {base}: {_first_line(exc)}") from None
    jobs = [j for j in jobs if j.submission_id]  # drivers started by hand have no job logs
    if wanted:
        for job in jobs:
            if wanted in (job.submission_id, job.job_id):
                return job
        raise LiveFailure(f"no job {wanted!r} on {base} ({_known(jobs)})")
    failed = [j for j in jobs if j.status == "FAILED"]  # oldest first
    if not failed:
        raise LiveFailure(f"no failed job on {base}: name one with --job ({_known(jobs)})")
    return failed[-1]


def _job(details) -> Job:
    status = getattr(details.status, "value", details.status)
    return Job(details.submission_id, details.job_id, str(status), details.entrypoint or "")


def _known(jobs: list[Job]) -> str:
    if not jobs:
        return "it has no submitted jobs"
    return "jobs: " + ", ".join(f"{j.submission_id} {j.status}" for j in jobs[-5:])


def _driver_log(client, job: Job) -> str:
    try:
        text = client.get_job_logs(job.submission_id)
    except Exception as exc:
        raise LiveFailure(
            f"cannot read the log of job {job.submission_id}: {_first_line(exc)}"
        ) from None
    return text[-MAX_FILE_BYTES:]


# ------------------------------------------------------------------------ state API


def _auth_headers() -> dict[str, str]:
    """Ray's own token headers (none when the cluster does not use token auth)."""
    try:
        from ray._private.authentication.http_token_authentication import (
            get_auth_headers_if_auth_enabled,
        )
    except ImportError:  # a Ray before token auth
        return {}
    return get_auth_headers_if_auth_enabled({})


def _get(session, url: str, **kwargs):
    try:
        response = session.get(url, timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S), **kwargs)
    except Exception as exc:
        raise LiveFailure(f"cannot reach the Ray dashboard at {url}: {_first_line(exc)}") from None
    if response.status_code == 404:
        raise LiveFailure(
            f"the dashboard at {url.split('/api/')[0]} has no state API (Ray's state API comes "
            "with ray[default] on the head node)"
        )
    if response.status_code in (401, 403):
        raise LiveFailure(f"the Ray dashboard at {url.split('/api/')[0]} {REFUSED}")
    if response.status_code != 200:
        raise LiveFailure(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
    return response


def _state(session, base: str, endpoint: str, **params) -> dict:
    url = f"{base}/api/v0/{endpoint}?{urllib.parse.urlencode(params)}"
    body = _get(session, url).json()
    if not body.get("result", False):
        raise LiveFailure(f"{url}: {body.get('msg') or 'the state API failed'}")
    return body["data"]["result"]


def _node_logs(base: str, job: Job, deadline: float, progress: Progress | None) -> LogResult:
    import requests

    found = LogResult()
    with requests.Session() as session:
        session.headers.update(_auth_headers())
        nodes = _state(session, base, "nodes", limit=1000, detail="false")
        alive = [n for n in nodes.get("result", []) if n.get("state") == "ALIVE"]
        wanted = []
        for node in alive:
            listing = _state(session, base, "logs", node_id=node["node_id"], glob="*")
            names = [n for files in listing.values() for n in files]
            wanted += [(node, name) for name in _worth_reading(names, job)]
        for done, (node, name) in enumerate(wanted, start=1):
            where = f"{base}/logs/{node.get('node_ip') or node['node_id'][:8]}/{name}"
            if time.monotonic() > deadline:
                left = len(wanted) - done + 1
                found.errors.append(ScanError(base, f"time budget spent: {left} log files unread"))
                break
            try:
                text = _tail(session, base, node["node_id"], name, deadline)
            except LiveFailure as exc:
                found.errors.append(ScanError(where, str(exc)))
                continue
            found.extend(parse_log(text.splitlines(), f"logs/{name}", where))
            if progress:
                progress("cluster logs", done, len(wanted))
    return found


def _worth_reading(names: list[str], job: Job) -> list[str]:
    """Session logs the readers know, a worker's only when it ran the job's tasks."""
    picked = []
    for name in names:
        base = name.rsplit("/", 1)[-1]
        if name.startswith("train/") and base.endswith(".log"):
            picked.append(name)
        elif "/" not in name and SESSION_LOG.match(base):
            if base.startswith("worker-") and job.job_id and f"-{job.job_id}-" not in base:
                continue
            picked.append(name)
    return picked[:MAX_NODE_FILES]


def _tail(session, base: str, node_id: str, name: str, deadline: float) -> str:
    params = {"node_id": node_id, "filename": name, "lines": MAX_FILE_LINES, "timeout": 30}
    url = f"{base}/api/v0/logs/file?{urllib.parse.urlencode(params)}"
    kept: deque[bytes] = deque()
    size = 0
    with _get(session, url, stream=True) as response:
        for chunk in response.iter_content(chunk_size=256 * 1024):
            kept.append(chunk)
            size += len(chunk)
            while size - len(kept[0]) > MAX_FILE_BYTES:
                size -= len(kept.popleft())
            if time.monotonic() > deadline:
                break
    return b"".join(kept)[-MAX_FILE_BYTES:].decode("utf-8", "replace")
