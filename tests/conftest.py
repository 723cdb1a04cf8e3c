"""Shared test helpers: a moved copy of the fixtures, the CLI, the report schema."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

# The Ctrl-C tests send SIGINT to the processes they start. A test run launched in the
# background of a non-interactive shell (`nohup make test &`, some CI runners) has SIGINT
# ignored, and an ignored signal stays ignored across exec: every child would shrug Ctrl-C
# off. Python's own handler here makes the children start with the default disposition.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())


# Peak RSS of a child process. Not getrusage: on Linux a child's ru_maxrss starts at its
# parent's (the forked pytest process, torch and all); VmHWM belongs to the exec'd image.
PEAK_RSS = (
    "def PEAK():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            return int(line.split()[1]) / 1024\n"
)


# `make test` runs the suite on two xdist workers (`-n 2 --dist loadgroup`). Every test that
# starts Ray goes to one of them, in collection order as without xdist: two Ray instances at
# once on two cores only slow each other down, and the session runs these tests share
# (tests/smoke_runs.py) are then made once. The other worker runs the rest meanwhile.
RAY_FIXTURES = frozenset(
    {
        "smoke_cpu",
        "smoke_no_gpu",
        "smoke_too_many_workers",
        "smoke_unreachable",
        "smoke_port_and_storage",
        "relaunch_reproduced",
        "relaunch_too_short",
        "relaunch_changed",
        "local_ray",
        "callback_runs",
        "live_job",
        "ray_head",
    }
)
RAY_TEST_DIRS = (REPO / "tests" / "smoke", REPO / "tests" / "integrations")


def starts_ray(item: pytest.Item) -> bool:
    return (
        item.get_closest_marker("ray") is not None
        or not RAY_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        or any(item.path.resolve().is_relative_to(folder) for folder in RAY_TEST_DIRS)
    )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if starts_ray(item):
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.hookimpl(optionalhook=True)  # an xdist hook: plain `pytest` runs without xdist too
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """Loud, not silent, if xdist stops honouring the group: Ray tests would then run two at a
    time and fail as a loaded machine's would (a Train run killed by the memory monitor)."""
    if node.config.getoption("dist") != "loadgroup" or any("@ray" in i for i in ids):
        return
    if any(i.startswith(("tests/smoke/", "tests/integrations/")) for i in ids):
        raise pytest.UsageError(
            "--dist loadgroup grouped nothing: this pytest and pytest-xdist do not work "
            "together (pytest-dev/pytest-xdist#1386); `make test` installs versions that do"
        )


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled fixtures, copied to another absolute path: experiments get moved."""
    moved = tmp_path_factory.mktemp("moved") / "elsewhere" / "fixtures"
    shutil.copytree(FIXTURES, moved, symlinks=True)
    return moved


def experiment_dir(fixtures: Path, scenario: str) -> Path:
    """fixtures/<scenario>/ray_results/<scenario>, the experiment dir Ray wrote."""
    base = fixtures / scenario if (fixtures / scenario).exists() else fixtures / "legacy" / scenario
    return base / "ray_results" / scenario


def validate(report: dict) -> dict:
    VALIDATOR.validate(report)
    return report


def run_cli(*args: str, stdin: str | None = None, env: dict | None = None, cwd: Path | None = None):
    """Run the real console entry point in a subprocess (real exit codes, real streams)."""
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120", **(env or {})}
    full_env.pop("RAY_DOCTOR_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "ray_doctor", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=120,
    )


def inspect_json(*args: str, stdin: str | None = None) -> tuple[int, dict]:
    """`ray-doctor inspect --format json ...`: the exit code and the validated report."""
    proc = run_cli("inspect", "--format", "json", *args, stdin=stdin)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, validate(json.loads(proc.stdout))


class _Canary:
    """Unpickling this creates the canary file: proof that something ran a full unpickler."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def canary_pickle(canary: Path) -> bytes:
    """A pickle that creates `canary` if anything ever unpickles it."""
    import pickle

    return pickle.dumps(_Canary(str(canary)), protocol=4)


def corpus_excerpt(case: str) -> str:
    """A real-world corpus case's excerpt (tests/corpus/cases/<case>), as posted."""
    sys.path.insert(0, str(REPO / "tests" / "corpus"))
    import measure

    return measure.parse_case(REPO / "tests" / "corpus" / "cases" / case).text


def findings_of(report: dict, rule: str) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == rule]


def tree_snapshot(root: Path) -> dict[str, tuple[int, float, bytes]]:
    """Every file under root with its size, mtime and bytes: to prove nothing was written."""
    snapshot = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            snapshot[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime, path.read_bytes())
        elif path.is_dir():
            snapshot[str(path.relative_to(root)) + "/"] = (0, path.stat().st_mtime, b"")
    return snapshot


@pytest.fixture
def healthy_pt(tmp_path: Path) -> Path:
    """A real torch checkpoint (model, Adam state, epoch) in a Ray-style checkpoint dir."""
    import torch
    from checkpoint.ckpt_helpers import trained_state

    path = tmp_path / "checkpoint_000003" / "checkpoint.pt"
    path.parent.mkdir()
    torch.save(trained_state(), path)
    return path


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """A real S3 server (moto's, a separate process) on loopback for the whole session.

    Yields an `S3Server` (tests/s3/s3_server.py): `.bucket()` makes a fresh bucket,
    `.upload(local_dir, bucket, prefix)` copies a tree with pyarrow.fs and returns its URI,
    `.uri(bucket, key)` builds `s3://bucket/key?endpoint_override=...&scheme=http`, `.env` holds
    the AWS_* variables a child process needs (plain `s3://` URIs work with them too),
    `.counting()` collects the requests the server answered, `.enforce_auth()` makes it refuse
    the test credentials (HTTP 403). The server is stopped when the session ends.
    """
    from s3.s3_server import start_s3_server

    server = start_s3_server("moto", tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


# Real `ray-doctor smoke` runs, made once per session (tests/smoke_runs.py).
from smoke_runs import (  # noqa: E402, F401
    relaunch_changed,
    relaunch_reproduced,
    relaunch_too_short,
    smoke_cpu,
    smoke_no_gpu,
    smoke_port_and_storage,
    smoke_too_many_workers,
    smoke_unreachable,
)
