"""`inspect --address`: a real head node with the dashboard, a submitted job that fails.

The head runs in a private temp dir on free ports. `ray stop` would stop every Ray instance on
the machine (it matches processes by name), so the test stops its own head the same way but
only the processes it started: every process of the head carries a tag in its environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest
from conftest import run_cli, validate
from smoke_runs import free_port, stop_processes

pytestmark = [pytest.mark.ray, pytest.mark.slow]

JOB = Path(__file__).with_name("live_job.py")
TAG = "RAY_DOCTOR_LIVE_TEST"


def _tagged(tag: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if process.environ().get(TAG) == tag:
                found.append(process)
        except psutil.Error:
            continue
    return found


def _stop_head(tag: str) -> list[psutil.Process]:
    """`ray stop` for this head's processes only; what is still alive after it."""
    stop_processes(_tagged(tag))
    return _tagged(tag)


# Module scope: the head node (with its dashboard) stops once these tests are done, instead of
# running beside every later Ray test of the session (on 2 cores under load, its polling alone
# made other tests' Ray instances miss their start-up wait).
@pytest.fixture(scope="module")
def live_job(tmp_path_factory):
    """A head node, the failing job's submission id, the dashboard URL, paths to compare."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    work = tmp_path_factory.mktemp("live")
    temp_dir = Path(tempfile.mkdtemp(prefix="rdlive-", dir="/tmp"))  # sockets: < 108 bytes
    tag = uuid.uuid4().hex
    dashboard = free_port()
    token = uuid.uuid4().hex + uuid.uuid4().hex
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}  # not ~/.ray's shared token
    env = {**os.environ, TAG: tag, "RAY_USAGE_STATS_ENABLED": "0", **auth}
    env.pop("RAY_ADDRESS", None)
    ports = {
        "--port": free_port(),
        "--dashboard-port": dashboard,
        "--ray-client-server-port": free_port(),
        "--node-manager-port": free_port(),
        "--object-manager-port": free_port(),
        "--metrics-export-port": free_port(),
        "--dashboard-agent-listen-port": free_port(),
        "--dashboard-agent-grpc-port": free_port(),
        "--runtime-env-agent-port": free_port(),
    }
    args = [a for flag, port in ports.items() for a in (flag, str(port))]
    command = [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--num-cpus=2",
        f"--temp-dir={temp_dir}", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
        "--disable-usage-stats", *args,
    ]  # fmt: skip
    url = f"http://127.0.0.1:{dashboard}"
    try:
        for _attempt in range(2):  # Ray gives a node 30 s to come up: a loaded machine may not
            # Its own session (autogroup), as a cluster started elsewhere: see test_smoke_join.
            start = subprocess.run(
                command, capture_output=True, text=True, env=env, timeout=240,
                start_new_session=True,
            )  # fmt: skip
            if start.returncode == 0:
                break
            _stop_head(tag)
        assert start.returncode == 0, start.stderr[-3000:]
        client = JobSubmissionClient(url, headers={"Authorization": f"Bearer {token}"})
        storage = work / "results"
        submission = client.submit_job(
            entrypoint=f"{sys.executable} {JOB} {storage}",
            runtime_env={"env_vars": {TAG: tag}},
        )
        deadline = time.monotonic() + 400
        while client.get_job_status(submission) not in (
            JobStatus.FAILED,
            JobStatus.SUCCEEDED,
            JobStatus.STOPPED,
        ):
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(2)
        driver_log = work / "driver.log"
        driver_log.write_text(client.get_job_logs(submission))
        session_logs = temp_dir / "session_latest" / "logs"
        yield {
            "url": url,
            "submission": submission,
            "status": client.get_job_status(submission),
            "driver_log": driver_log,
            "session_logs": session_logs,
            "experiment": storage / "live_job",
            "auth": auth,
        }
    finally:
        left = _stop_head(tag)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not left, f"processes of the head still alive: {left}"


def _rules(proc) -> set[str]:
    assert "Traceback" not in proc.stderr, proc.stderr
    report = validate(json.loads(proc.stdout))
    return {f["rule"] for f in report["findings"]}


def test_inspect_a_failed_job_on_a_live_cluster_gives_what_its_saved_logs_give(live_job):
    assert live_job["status"] == "FAILED"
    live = run_cli(
        "inspect",
        "--address",
        live_job["url"],
        "--job",
        live_job["submission"],
        "-f",
        "json",
        env=live_job["auth"],
    )
    assert live.returncode == 1, live.stderr
    saved = run_cli(
        "inspect",
        str(live_job["experiment"]),
        "--logs",
        str(live_job["driver_log"]),
        "--logs",
        str(live_job["session_logs"]),
        "-f",
        "json",
    )
    assert "trial-error" in _rules(live)
    assert _rules(live) == _rules(saved)
    report = json.loads(live.stdout)
    # The experiment the job's output names was read in the same report.
    assert report["target"]["layout"] == "tune"
    assert report["summary"]["trials_by_status"]["ERROR"] == 1
    assert any("api/jobs" in log for e in report["experiments"] for log in e["logs"])


def test_without_job_the_most_recent_failed_job_is_inspected(live_job):
    proc = run_cli("inspect", "--address", live_job["url"], "-f", "json", env=live_job["auth"])
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    logs = [log for e in report["experiments"] for log in e["logs"]]
    assert any(live_job["submission"] in log for log in logs)


def test_a_refused_token_is_one_line_and_exit_2(live_job):
    wrong = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex + uuid.uuid4().hex}
    proc = run_cli("inspect", "--address", live_job["url"], env=wrong)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the request" in lines[0], proc.stderr


def test_an_unreachable_dashboard_is_one_line_and_exit_2():
    proc = run_cli("inspect", "--address", f"http://127.0.0.1:{free_port()}")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Ray dashboard" in lines[0], proc.stderr


def test_a_port_that_reads_like_an_http_status_is_not_a_refused_token():
    """Port 403xx holds "403": an unreachable dashboard there is unreachable, not refused."""
    port = next(p for p in range(40300, 40400) if _port_is_free(p))
    proc = run_cli("inspect", "--address", f"http://127.0.0.1:{port}")
    assert proc.returncode == 2
    assert "cannot reach the Ray dashboard" in proc.stderr and "token" not in proc.stderr


def _port_is_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
