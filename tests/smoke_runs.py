"""Real `ray-doctor smoke` runs, each made once per test session and shared.

A smoke run starts a real Ray instance (seconds to a minute on two cores), so the scenarios
the smoke tests and the smoke rules' tests assert on are session fixtures, imported into
conftest. Each run goes through the real console entry point in a subprocess, with TMPDIR
pointed at a fresh dir so the test can prove smoke removed its temp files.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
GENERATOR = REPO / "fixtures" / "generate.py"
SMOKE_TIMEOUT_S = 240  # a hang guard for the subprocess, far above what a run takes
CPUS = os.cpu_count() or 1  # what a local Ray instance counts (smoke sets no num_cpus)


@dataclass
class SmokeRun:
    returncode: int
    report: dict
    stdout: str
    stderr: str
    seconds: float
    tmpdir: Path
    # Smoke experiment dirs in the user's local results dir (~/ray_results) that the run left
    # (Ray 2.7-2.9 stage every experiment there as well as in its storage_path).
    staged_left: set[str] = field(default_factory=set)

    def __repr__(self) -> str:
        # What a failed assertion should show: how the run ended, not its whole report.
        stages = [
            f"{s['name']}={s['status']}: {s.get('message', '')[:200]}"
            for s in self.report["stages"]
        ]
        return (
            f"SmokeRun(returncode={self.returncode}, seconds={self.seconds:.0f}, "
            f"errors={self.report.get('errors')}, stages={stages}, tmpdir={self.tmpdir})"
        )

    def stage(self, name: str) -> dict:
        (stage,) = [s for s in self.report["stages"] if s["name"] == name]
        return stage

    def findings(self, rule: str) -> list[dict]:
        return [f for f in self.report["findings"] if f["rule"] == rule]


def smoke_env(tmpdir: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120", "TMPDIR": str(tmpdir), **extra}
    for name in ("RAY_DOCTOR_DEBUG", "RAY_ADDRESS", "MASTER_PORT"):
        env.pop(name, None)
    return env


def run_smoke(
    tmpdir: Path, *args: str, env: dict[str, str] | None = None, timeout: float = SMOKE_TIMEOUT_S
) -> SmokeRun:
    """`ray-doctor smoke --format json ARGS` in a subprocess; the report is validated."""
    from conftest import validate

    tmpdir.mkdir(parents=True, exist_ok=True)
    staged_before = _staged_smoke_dirs()
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ray_doctor", "smoke", "--format", "json", *args],
        capture_output=True,
        text=True,
        env=env or smoke_env(tmpdir),
        timeout=timeout,
        cwd=tmpdir,
    )
    seconds = time.monotonic() - started
    assert "Traceback" not in proc.stderr, proc.stderr
    report = validate(json.loads(proc.stdout))
    left = _staged_smoke_dirs() - staged_before
    return SmokeRun(proc.returncode, report, proc.stdout, proc.stderr, seconds, tmpdir, left)


def _staged_smoke_dirs() -> set[str]:
    results = Path.home() / "ray_results"
    return {p.name for p in results.glob("ray-doctor-smoke-*")} if results.is_dir() else set()


def processes_naming(fragment: str) -> list[str]:
    """Live processes whose command line contains `fragment`."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or [])
        except psutil.Error:
            continue
        if fragment in cmdline and process.pid != os.getpid():
            found.append(f"{process.pid} {cmdline[:120]}")
    return found


# Ray's gcs_server ignores SIGTERM: `ray stop` waits out its grace period (16 s) before
# SIGKILL. A test's own head has nothing to flush, so a short grace does the same job.
STOP_GRACE_S = 3


def stop_processes(processes: list[psutil.Process]) -> None:
    """What `ray stop` does to a head's processes (SIGTERM, a grace period, SIGKILL)."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=STOP_GRACE_S)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=10)


def assert_nothing_left(run: SmokeRun) -> None:
    """No Ray process of the run alive, its temp dirs gone, no stage runner left."""
    cluster = run.stage("cluster")
    ray_temp_dir = cluster["details"].get("ray_temp_dir")
    if ray_temp_dir:
        assert not processes_naming(ray_temp_dir)
        assert not Path(ray_temp_dir).exists()
    # Only this run's runner: other smoke runs (other tests, other checkouts) may be alive.
    assert not processes_naming(str(run.tmpdir)), "a stage runner of this run is still alive"
    assert not list(run.tmpdir.glob("ray-doctor-smoke-*")), "smoke left its work dir behind"
    assert not run.staged_left, f"smoke left Ray's staged copy in ~/ray_results: {run.staged_left}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def relaunch_args(fixtures: Path, trainable: str, *extra: str) -> list[str]:
    experiment = fixtures / "tune_trial_error" / "ray_results" / "tune_trial_error"
    return [
        "--from",
        str(experiment),
        "--trial",
        "b0523_00002",
        "--entrypoint",
        f"{GENERATOR}:{trainable}",
        *extra,
    ]


# ------------------------------------------------------------------------ session runs


@pytest.fixture(scope="session")
def smoke_cpu(tmp_path_factory) -> SmokeRun:
    """The default smoke, CPU mode: every stage, as CI runs it."""
    return run_smoke(tmp_path_factory.mktemp("smoke_cpu"))


@pytest.fixture(scope="session")
def smoke_no_gpu(tmp_path_factory) -> SmokeRun:
    """`--gpus 1` on a machine without GPUs. "Fails fast" is asserted as an outcome (every
    later stage skipped, nothing waits on a request that cannot fit), not as a wall-time
    budget: Ray's own start alone can take half a minute on a loaded 2-core machine."""
    return run_smoke(tmp_path_factory.mktemp("smoke_no_gpu"), "--gpus", "1")


@pytest.fixture(scope="session")
def smoke_too_many_workers(tmp_path_factory) -> SmokeRun:
    """`--workers 4` on a machine with fewer CPUs: a request smoke itself cannot place."""
    return run_smoke(tmp_path_factory.mktemp("smoke_workers"), "--workers", str(CPUS + 2))


@pytest.fixture(scope="session")
def smoke_unreachable(tmp_path_factory) -> SmokeRun:
    return run_smoke(
        tmp_path_factory.mktemp("smoke_unreachable"), "--address", f"127.0.0.1:{free_port()}"
    )


@pytest.fixture(scope="session")
def smoke_port_and_storage(tmp_path_factory) -> tuple[SmokeRun, int]:
    """A port held by this test process, and a storage path no one can write to."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        run = run_smoke(
            tmp_path_factory.mktemp("smoke_port"),
            "--stage", "port",
            "--stage", "checkpoint",
            "--master-port", str(port),
            "--storage-path", "/proc/ray-doctor-smoke-unwritable/results",
        )  # fmt: skip
    return run, port


@pytest.fixture(scope="session")
def relaunch_reproduced(fixtures, tmp_path_factory) -> SmokeRun:
    """tune_trial_error's failed trial, re-run with the fixture's own trainable."""
    return run_smoke(
        tmp_path_factory.mktemp("relaunch"), *relaunch_args(fixtures, "tune_trial_error_trainable")
    )


@pytest.fixture(scope="session")
def relaunch_too_short(fixtures, tmp_path_factory) -> SmokeRun:
    """The same, stopped after 2 iterations: before the step where the original failed."""
    return run_smoke(
        tmp_path_factory.mktemp("relaunch_short"),
        *relaunch_args(fixtures, "tune_trial_error_trainable", "--iterations", "2"),
    )


@pytest.fixture(scope="session")
def relaunch_changed(fixtures, tmp_path_factory) -> SmokeRun:
    """The failed trial's config with a trainable that now fails on a missing module."""
    return run_smoke(
        tmp_path_factory.mktemp("relaunch_changed"),
        *relaunch_args(fixtures, "tune_missing_module_trainable"),
    )


def normalized(text: str) -> str:
    """Output with what changes from run to run masked: paths, ids, pids, numbers."""
    import re

    text = text.replace(f"{REPO}/", "")
    text = re.sub(r"/[\w/.-]*?/ray-doctor-smoke-\w+/storage", "<smoke storage>", text)
    text = re.sub(r"\b[0-9a-f]{5}_\d{5}\b", "<trial>", text)
    text = re.sub(r"ray-doctor-smoke-[0-9a-f]+", "ray-doctor-smoke-<run>", text)
    # Peaks are sampled: a very short re-run on a busy machine may end before the first one.
    text = re.sub(r" Peak host RSS [^)]*\)\.", "", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)


def assert_matches_doc_example(rule_id: str, run: SmokeRun) -> None:
    """pylint's lesson: the rule page's recorded example must still be what smoke says
    (`python docs/generate.py --smoke` re-records it)."""
    from ray_doctor.rules._docs import render_findings, smoke_examples
    from ray_doctor.smoke._model import finding_from_json

    recorded = smoke_examples()[rule_id]["output"]
    live = render_findings([finding_from_json(f) for f in run.findings(rule_id)])
    first = lambda text: normalized(text).splitlines()[0]  # noqa: E731
    assert first(live) == first(recorded), "re-record: python docs/generate.py --smoke"
    fix = lambda text: next(x for x in normalized(text).splitlines() if x.startswith("  fix:"))  # noqa: E731
    assert fix(live) == fix(recorded), "re-record: python docs/generate.py --smoke"


def start_local_ray(temp_dir: str, **kwargs) -> None:
    """ray.init of a 2-CPU local node, once more if it did not register within Ray's fixed
    30 s (`raylet_start_wait_time_s`, ray/_private/node.py): a saturated machine can miss it."""
    import ray

    options = {"num_cpus": 2, "_temp_dir": temp_dir, "include_dashboard": False, **kwargs}
    try:
        ray.init(**options)
    except Exception as exc:
        if "timed out during startup" not in str(exc):
            raise
        ray.shutdown()
        ray.init(**options)
