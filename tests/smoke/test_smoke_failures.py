"""Smoke's own failure modes: no GPU, no cluster, a bound on time, Ctrl-C; and its report."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import validate
from smoke_runs import assert_nothing_left, processes_naming, run_smoke, smoke_env


def test_gpus_on_a_machine_without_gpus_fails_fast(smoke_no_gpu):
    assert smoke_no_gpu.returncode == 1
    (finding,) = smoke_no_gpu.findings("resources-insufficient")
    assert "1 GPU" in finding["message"] and "the cluster has 0 GPUs" in finding["message"]
    assert "nvidia-smi" in finding["fix"]
    later = [s["status"] for s in smoke_no_gpu.report["stages"][1:]]
    assert later and set(later) == {"skip"}, "nothing waits on a request that cannot fit"
    assert_nothing_left(smoke_no_gpu)


def test_an_unreachable_address_could_not_start(smoke_unreachable):
    assert smoke_unreachable.returncode == 2
    (finding,) = smoke_unreachable.findings("cluster-unreachable")
    assert "Connection refused" in finding["message"]
    assert smoke_unreachable.report["errors"], "exit 2 says why in errors[]"
    assert smoke_unreachable.report["target"]["path"].startswith("127.0.0.1:")


def test_timeout_ends_everything_and_reports_what_finished(tmp_path):
    run = run_smoke(tmp_path, "--timeout", "14")
    assert run.returncode == 2
    assert run.seconds < 14 + 25, "the run is stopped at --timeout, with a grace to clean up"
    assert run.stage("cluster")["status"] == "pass"
    # What was running when time ran out is an error; what never started is skipped.
    later = {s["name"]: s["status"] for s in run.report["stages"][1:]}
    assert set(later.values()) <= {"error", "skip"}, later
    assert later["device"] == "error" or later["collective"] == "error", later
    assert any("--timeout 14" in e["reason"] for e in run.report["errors"])
    assert_nothing_left(run)


def _smoke_ray_dirs() -> set[str]:
    """Private Ray temp dirs (/tmp/rdsmoke-*) named by live raylet / gcs_server processes."""
    found = set()
    for line in processes_naming("rdsmoke-"):
        if "raylet" in line or "gcs_server" in line:
            found.update(re.findall(r"/tmp/rdsmoke-\w+", line))
    return found


def test_ctrl_c_stops_ray_and_leaves_the_partial_report(tmp_path):
    already = _smoke_ray_dirs()
    child = subprocess.Popen(
        [sys.executable, "-m", "ray_doctor", "smoke", "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=smoke_env(tmp_path),
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not _smoke_ray_dirs() - already:
        time.sleep(0.2)
    ray_dirs = _smoke_ray_dirs() - already
    assert ray_dirs, "smoke should have started Ray by now"
    time.sleep(2)  # let it get into a stage
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130
    assert "interrupted" in err and "Traceback" not in err
    report = validate(json.loads(out))
    assert any(e["reason"] == "the run was interrupted" for e in report["errors"])
    assert any(s["status"] in ("error", "skip") for s in report["stages"])
    for ray_dir in ray_dirs:
        assert not processes_naming(ray_dir)
        assert not Path(ray_dir).exists()
    assert not list(tmp_path.glob("ray-doctor-smoke-*"))
