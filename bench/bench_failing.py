"""Benchmark: `ray-doctor inspect` on sweeps that failed, against ExperimentAnalysis and a floor.

Builds a sweep of N trials x M iterations in which a share of the trials errored, with several
causes mixed. Every trial is a copy of a REAL Ray 2.60 trial from the committed fixtures, with
its trial id rewritten (experiment-state entry, trial dir, result.json, progress.csv, error.txt,
params, checkpoints):

- healthy trials: the three of fixtures/tune_healthy in turns (lr 0.001, 0.01, 0.1; result rows
  cycled to M iterations, as in bench_inspect.py), and one in ten a finished trial of fixtures/tune_config_correlated (small
  `batch_size`), so that batch size separates failed from finished trials;
- errored trials, in turns: the ValueError of tune_trial_error, the OOM-prone large-batch
  failure of tune_config_correlated, the corrupt-checkpoint restore of tune_corrupt_checkpoint
  and the retries of tune_retries_exhausted (the four causes issue 12 names).

Then, each in its own process, on the same dir and in the same run:

- `ray-doctor inspect DIR --format json -q`;
- `ExperimentAnalysis(DIR).dataframe()` (Ray's own post-hoc API);
- the floor: plain Python reading the same bytes ray-doctor reads (the experiment state parsed
  with `json.loads`, each trial dir listed, its `result.json` and `error.txt` read whole and
  their newlines counted), single process.

`--logs` adds a Ray session logs dir of >= 200 MB (`raylet.out`, `gcs_server.out`, worker
`.out`/`.err` files) built by repeating the real lines of fixtures/*/session_logs, with the
real OOM session's own files at the end; the floor then also reads every log byte line by line.
A second `--logs` run reads a session of the same size from a long run that went well until
the same kill: a healthy Train V2 session's real lines with their numbers changed, where few
lines hold a cause word (`build_quiet_logs`).
Wall time and peak RSS come from GNU time (bench/_measure.py). Figures go in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from _measure import measure  # noqa: E402
from bench_inspect import ANCHOR, ANCHOR_OK, _result_bytes, built  # noqa: E402

FIXTURES = REPO / "fixtures"
# (fixture, why the trial failed): the errored trials replicated in turns.
ERROR_SOURCES = (
    ("tune_trial_error", "ValueError raised by the trainable"),
    ("tune_config_correlated", "large batch sizes fail"),
    ("tune_corrupt_checkpoint", "restore from a corrupt checkpoint"),
    ("tune_retries_exhausted", "retries exhausted"),
)
FLOOR = r"""
import json, os, sys
exp = sys.argv[1]
lines = 0
for name in sorted(os.listdir(exp)):
    path = os.path.join(exp, name)
    if name.startswith("experiment_state-"):
        with open(path, "rb") as f:
            state = json.loads(f.read())
        for pair in state["trial_data"]:
            json.loads(pair[0]); json.loads(pair[1])
    elif os.path.isdir(path):
        for file in os.listdir(path):
            if file in ("result.json", "error.txt"):
                with open(os.path.join(path, file), "rb") as f:
                    lines += f.read().count(b"\n")
for logs in sys.argv[2:]:
    for name in sorted(os.listdir(logs)):
        with open(os.path.join(logs, name), "rb") as f:
            for line in f:
                lines += 1
print(lines, file=sys.stderr)
"""


@dataclass
class Source:
    """One real trial to replicate: its experiment-state pair and its dir."""

    trial: dict
    meta: dict
    directory: Path

    @property
    def trial_id(self) -> str:
        return self.trial["trial_id"]


def _sources(fixture: str, status: str) -> list[Source]:
    exp = FIXTURES / fixture / "ray_results" / fixture
    state = json.loads(max(exp.glob("experiment_state-*.json")).read_text())
    found = []
    for pair in state["trial_data"]:
        trial = json.loads(pair[0])
        if trial["status"] == status:
            found.append(Source(trial, json.loads(pair[1]), exp / trial["relative_logdir"]))
    return sorted(found, key=lambda s: s.trial_id)


def _copy_trial(source: Source, dest: Path, new_id: str, result: bytes | None = None) -> list:
    """Copy the trial dir with its id rewritten; returns its experiment-state pair."""
    old = source.trial_id.encode()
    trial_text = json.dumps(source.trial).replace(source.trial_id, new_id)
    # ExperimentAnalysis finds the trial dir by the name in the trial's storage context, a
    # pickle kept as hex: the ids are the same length, so their bytes swap in place.
    assert len(new_id) == len(source.trial_id)
    trial_text = trial_text.replace(source.trial_id.encode().hex(), new_id.encode().hex())
    logdir = source.trial["relative_logdir"].replace(source.trial_id, new_id)
    out = dest / logdir
    out.mkdir()
    for item in source.directory.iterdir():
        if item.is_dir():
            shutil.copytree(item, out / item.name)
        elif item.name == "result.json" and result is not None:
            (out / item.name).write_bytes(result)
        else:
            (out / item.name).write_bytes(item.read_bytes().replace(old, new_id.encode()))
    return [trial_text, json.dumps(source.meta).replace(source.trial_id, new_id)]


def build(dest: Path, trials: int, iterations: int, errored_share: float) -> Path:
    """Write the failing sweep; reuses dest when it was built with the same shape."""
    shape = f"{trials}x{iterations}@{errored_share}:" + ",".join(f for f, _ in ERROR_SOURCES)
    shape += ":storage-ids"  # built since trial ids are rewritten in the storage pickle too
    if built(dest, shape):
        return dest
    marker = dest / ".bench-shape"
    healthy = _sources("tune_healthy", "TERMINATED")  # lr 0.001, 0.01 and 0.1
    healthy_results = []
    for source in healthy:
        source.meta["last_result"] = dict(source.meta["last_result"], training_iteration=iterations)
        rows = [json.loads(line) for line in (source.directory / "result.json").open()]
        healthy_results.append(_result_bytes(rows, iterations, source.trial_id)[0])
    small_batch = _sources("tune_config_correlated", "TERMINATED")
    failing = [_sources(fixture, "ERROR") for fixture, _ in ERROR_SOURCES]
    prefix = healthy[0].trial_id.split("_")[0]
    template_dir = healthy[0].directory.parent
    every = round(1 / errored_share)
    for name in ("tuner.pkl", ".validate_storage_marker"):
        shutil.copy(template_dir / name, dest / name)
    state_name = max(template_dir.glob("experiment_state-*.json")).name
    with open(dest / state_name, "w") as state_file:
        state_file.write('{"trial_data": [')
        errored = finished = 0
        for i in range(trials):
            new_id = f"{prefix}_{i:05d}"
            if i % every == every - 1:  # errored: the causes in turns, each its real trials
                kind = failing[errored % len(failing)]
                pair = _copy_trial(kind[(errored // len(failing)) % len(kind)], dest, new_id)
                errored += 1
            elif finished % 10 == 9:
                pair = _copy_trial(small_batch[finished % len(small_batch)], dest, new_id)
                finished += 1
            else:
                source = healthy[finished % len(healthy)]
                result = healthy_results[finished % len(healthy)]
                result = result.replace(source.trial_id.encode(), new_id.encode())
                pair = _copy_trial(source, dest, new_id, result)
                finished += 1
            state_file.write(("," if i else "") + json.dumps(pair))
        stats = json.dumps({"start_time": time.time()})
        state_file.write(f'], "runner_data": {{}}, "stats": {stats}}}')
    marker.write_text(shape)
    return dest


def build_logs(dest: Path, megabytes: int) -> Path:
    """A session logs dir of `megabytes`: the real lines of every fixture's session logs
    repeated per file kind, then the OOM session's own files (with the kill) at the end."""
    if built(dest, str(megabytes)):
        return dest
    marker = dest / ".bench-shape"
    chatter: dict[str, bytes] = {"raylet.out": b"", "gcs_server.out": b"", "worker": b""}
    for logs in sorted(FIXTURES.glob("*/session_logs")):
        if logs.parent.name == "tune_oom_memory_monitor":
            continue
        for file in logs.iterdir():
            kind = file.name if file.name in chatter else "worker"
            if file.name.startswith(("worker-", "raylet", "gcs_server")):
                chatter[kind] += file.read_bytes()
    oom = FIXTURES / "tune_oom_memory_monitor" / "session_logs"
    budget = megabytes * 2**20
    # raylet.out half, gcs a tenth, the rest over 16 workers' .out and .err.
    shares = {"raylet.out": budget // 2, "gcs_server.out": budget // 10}
    worker_files = sorted(f.name for f in oom.glob("worker-*"))
    for n in range(8):
        for name in worker_files[:2]:
            shares[name.replace("-0100", f"-{n:02d}00")] = (budget * 4 // 10) // 16
    for name, size in shares.items():
        kind = name if name in chatter else "worker"
        block = chatter[kind] or chatter["raylet.out"]
        with open(dest / name, "wb") as out:
            out.write(block * (size // len(block) + 1))
            if (oom / name).exists():
                out.write((oom / name).read_bytes())
    for file in oom.iterdir():  # the real session's other files (core-worker logs)
        if not (dest / file.name).exists():
            shutil.copy(file, dest / file.name)
    marker.write_text(str(megabytes))
    return dest


HEALTHY_SESSION = FIXTURES / "train_v2_healthy" / "session_logs"
NUMBER = re.compile(rb"\d+")


def _varied(lines: list[bytes], variants: int) -> bytes:
    """`lines` `variants` times over, each time with every number replaced by another of as
    many digits (timestamps, pids, ids and losses change as a long run goes on)."""
    rnd = random.Random(12)

    def renumber(match: re.Match[bytes]) -> bytes:
        return str(rnd.randrange(10 ** len(match[0]))).zfill(len(match[0])).encode()

    return b"".join(NUMBER.sub(renumber, line) + b"\n" for _ in range(variants) for line in lines)


def build_quiet_logs(dest: Path, megabytes: int) -> Path:
    """A session logs dir of `megabytes` from a long run that went well until it did not: a
    healthy Train V2 session's real lines (raylet.out, gcs_server.out, and a worker's loss
    prints with a checkpoint and its report line every 99 of them) repeated with their numbers
    changed, then the OOM session's own files (with the kill) at the end. Unlike `build_logs`, few lines hold a cause
    word, so a reader cannot stop early at its event cap: every line counts."""
    shape = f"quiet-2 {megabytes}"
    if built(dest, shape):
        return dest
    worker_err = next(HEALTHY_SESSION.glob("worker-*-13147.err")).read_bytes().splitlines()
    prints = [line for line in worker_err if line.startswith(b"[rank")]
    saves = [line for line in worker_err if line.startswith((b"Checkpoint", b"Report"))]
    sources = {
        "raylet.out": (HEALTHY_SESSION / "raylet.out").read_bytes().splitlines(),
        "gcs_server.out": (HEALTHY_SESSION / "gcs_server.out").read_bytes().splitlines(),
        # The run printed its loss every epoch and checkpointed every one: a long run prints
        # far more often than it checkpoints (here 99 prints to a checkpoint and its report).
        "worker": prints * 33 + saves[:2],
    }
    blocks = {kind: _varied(lines, 200) for kind, lines in sources.items()}
    oom = FIXTURES / "tune_oom_memory_monitor" / "session_logs"
    budget = megabytes * 2**20
    shares = {"raylet.out": budget // 2, "gcs_server.out": budget // 10}
    for n in range(8):
        for name in sorted(f.name for f in oom.glob("worker-*"))[:2]:
            shares[name.replace("-0100", f"-{n:02d}00")] = (budget * 4 // 10) // 16
    for name, size in shares.items():
        block = blocks[name if name in blocks else "worker"]
        with open(dest / name, "wb") as out:
            out.write(
                block * (size // len(block))
                + block[: size % len(block)].rsplit(b"\n", 1)[0]
                + b"\n"
            )
            if (oom / name).exists():
                out.write((oom / name).read_bytes())
    for file in oom.iterdir():
        if not (dest / file.name).exists():
            shutil.copy(file, dest / file.name)
    (dest / ".bench-shape").write_text(shape)
    return dest


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def _best(runs: int, command: list[str], ok_codes: tuple[int, ...] = (0, 1)) -> tuple[float, float]:
    results = [measure(command, ok_codes) for _ in range(runs)]
    return min(r[0] for r in results), max(r[1] for r in results)


# Runs `ray-doctor` from another copy of the package (`--before DIR`: DIR holds ray_doctor/).
FROM_DIR = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'ray-doctor'; "
    "from ray_doctor._cli import main; main()"
)


def compare(
    label: str,
    exp: Path,
    logs: Path | None,
    runs: int,
    anchor_runs: int,
    before: Path | None = None,
) -> None:
    python = sys.executable
    args = ["inspect", "--format", "json", "-q", str(exp)]
    if logs:
        args += ["--logs", str(logs)]
    doctor = [python, "-m", "ray_doctor", *args]
    floor = [python, "-c", FLOOR, str(exp), *([str(logs)] if logs else [])]
    size = _size_mb(exp) + (_size_mb(logs) if logs else 0)
    load = os.getloadavg()[0]
    print(f"{label} ({size:.0f} MB, load {load:.1f})", flush=True)
    if before is None:
        wall, rss = _best(runs, doctor)
    else:  # interleaved, so both see the same load
        old_cmd = [python, "-c", FROM_DIR, str(before), *args]
        pairs = [(measure(old_cmd), measure(doctor)) for _ in range(runs)]
        old_wall = min(p[0][0] for p in pairs)
        old_rss = max(p[0][1] for p in pairs)
        wall = min(p[1][0] for p in pairs)
        rss = max(p[1][1] for p in pairs)
    floor_wall, floor_rss = _best(runs, floor)
    if before is not None:
        print(f"  ray-doctor inspect (--before):     {old_wall:7.2f} s  {old_rss:6.0f} MB peak RSS")
        print(f"  --before / floor: {old_wall / floor_wall:.1f}x")
    print(f"  ray-doctor inspect:                {wall:7.2f} s  {rss:6.0f} MB peak RSS")
    print(f"  plain-Python floor:                {floor_wall:7.2f} s  {floor_rss:6.0f} MB peak RSS")
    print(f"  ray-doctor / floor: {wall / floor_wall:.1f}x (target <= 3x)")
    if anchor_runs:
        anchor_wall, anchor_rss = _best(anchor_runs, [python, "-c", ANCHOR, str(exp)], ANCHOR_OK)
        print(f"  ExperimentAnalysis + dataframe():  {anchor_wall:7.2f} s  {anchor_rss:6.0f} MB")
        print(f"  speed-up: {anchor_wall / wall:.1f}x (target >= 20x)", flush=True)
        if before is not None:
            print(f"  --before speed-up: {anchor_wall / old_wall:.1f}x", flush=True)
    print(f"  (load {os.getloadavg()[0]:.1f} at the end)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1000x300,10000x100", help="TRIALSxITERATIONS,...")
    parser.add_argument("--errored", default="0.1,0.5", help="shares of errored trials")
    parser.add_argument("--logs-mb", type=int, default=200, help="0 skips the --logs run")
    parser.add_argument("--runs", type=int, default=3, help="best wall time of this many")
    parser.add_argument("--anchor-runs", type=int, default=1, help="0 skips ExperimentAnalysis")
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    parser.add_argument(
        "--before",
        type=Path,
        help="a dir holding another ray_doctor package (e.g. `git archive main ray_doctor` "
        "unpacked): timed too, interleaved with this one",
    )
    parser.add_argument("--only-logs", action="store_true", help="just the --logs comparison")
    args = parser.parse_args()
    # ExperimentAnalysis takes an absolute path or a URI ("URI has empty scheme" otherwise).
    args.workdir = args.workdir.resolve()
    if args.before is not None:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(args.before / "ray_doctor")], check=True
        )
    # Run from compiled bytecode, as after a wheel install (see bench_inspect.py).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "ray_doctor")], check=True)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} on {os.cpu_count()} cores")
    first = None
    for shape in args.shapes.split(","):
        trials, iterations = (int(x) for x in shape.split("x"))
        for share in (float(x) for x in args.errored.split(",")):
            dest = args.workdir / f"failing_{trials}x{iterations}_{share:g}" / "failing_exp"
            exp = build(dest, trials, iterations, share)
            first = first or exp
            if args.only_logs:
                break
            label = f"{trials:,} trials x {iterations} iterations, {share:.0%} errored"
            compare(label, exp, None, args.runs, args.anchor_runs, args.before)
        if args.only_logs:
            break
    if args.logs_mb and first is not None:
        logs = build_logs(args.workdir / f"session_{args.logs_mb}mb" / "logs", args.logs_mb)
        label = f"{first.parent.name} with --logs {args.logs_mb} MB"
        compare(label, first, logs, args.runs, 0, args.before)
        quiet = args.workdir / f"quiet_session_{args.logs_mb}mb" / "logs"
        logs = build_quiet_logs(quiet, args.logs_mb)
        label = f"{first.parent.name} with --logs {args.logs_mb} MB of a long quiet run"
        compare(label, first, logs, args.runs, 0, args.before)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
