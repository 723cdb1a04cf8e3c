"""Smoke joins an existing cluster (`ray start --head`) and leaves it as it found it."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from smoke_runs import free_port, processes_naming, run_smoke, smoke_env, stop_processes

RAY = Path(sys.executable).with_name("ray")


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A head node of our own: its own port, temp dir and HOME (so its own auth token)."""
    home = tmp_path_factory.mktemp("home")
    temp_dir = tempfile.mkdtemp(prefix="rdhead-", dir="/tmp")
    port = free_port()
    env = {**os.environ, "HOME": str(home)}
    env.pop("RAY_ADDRESS", None)
    # With a token in ~/.ray, `ray start` requires it (Ray 2.60): a secured cluster.
    subprocess.run(
        [str(RAY), "get-auth-token", "--generate"], env=env, check=True, capture_output=True
    )
    # In a session of its own, as a cluster started from another shell is. Ray runs its workers
    # at nice 15, and Linux weighs niceness within a session's autogroup: in the test run's
    # session, beside a CPU hog at nice 0 (make test-under-load), the trial got ~3 % of a core
    # and missed the device stage's 180 s; smoke's own runner has a session of its own too.
    subprocess.run(
        [str(RAY), "start", "--head", f"--port={port}", "--num-cpus=2", f"--temp-dir={temp_dir}",
         "--include-dashboard=false", "--disable-usage-stats"],
        env=env, check=True, capture_output=True, timeout=120, start_new_session=True,
    )  # fmt: skip
    yield {"address": f"127.0.0.1:{port}", "home": home, "temp_dir": temp_dir}
    # Never `ray stop`: it stops every Ray instance on the machine. Stop this one's processes.
    processes = [
        p for p in psutil.process_iter(["cmdline"]) if temp_dir in " ".join(p.info["cmdline"] or [])
    ]
    stop_processes(processes)
    shutil.rmtree(temp_dir, ignore_errors=True)


def test_joins_a_token_cluster_and_says_drivers_need_token_mode(ray_head, tmp_path):
    env = smoke_env(tmp_path, HOME=str(ray_head["home"]))
    env.pop("RAY_AUTH_MODE", None)
    run = run_smoke(
        tmp_path, "--address", ray_head["address"], "--stage", "device", "--stage", "checkpoint",
        "--stage", "port", "--stage", "environment", env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout
    assert {s["name"]: s["status"] for s in run.report["stages"]} == {
        "cluster": "pass", "device": "pass", "checkpoint": "pass", "port": "pass", "environment": "pass",
    }  # fmt: skip
    (warning,) = run.findings("cluster-unreachable")
    assert warning["severity"] == "warning" and "RAY_AUTH_MODE=token" in warning["fix"]
    cluster = run.stage("cluster")["details"]
    assert cluster["started"] is False and cluster["ray_temp_dir"] is None
    # The user's cluster is still up, and smoke's driver is gone.
    assert any("gcs_server" in p for p in processes_naming(ray_head["temp_dir"]))
    assert not processes_naming(str(tmp_path)), "smoke's stage runner is still alive"


def test_no_warning_when_the_driver_already_sends_the_token(ray_head, tmp_path):
    env = smoke_env(tmp_path, HOME=str(ray_head["home"]), RAY_AUTH_MODE="token")
    run = run_smoke(tmp_path, "--address", ray_head["address"], "--stage", "environment", env=env)
    assert run.returncode == 0, run.stdout
    assert run.report["findings"] == []
    assert run.stage("environment")["status"] == "pass"
