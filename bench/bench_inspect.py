"""Benchmark: `ray-doctor inspect` against `ray.tune.ExperimentAnalysis` on a large sweep.

Builds an experiment by replicating a real Ray 2.60 trial (fixtures/tune_healthy) to N trials
x M iterations: the real experiment_state entry, params, checkpoints and result rows, with
trial ids, iterations and timestamps rewritten. Then, each in its own process on the same dir:

- `ray-doctor inspect DIR --format json -q` (reads every byte of every result.json);
- `ExperimentAnalysis(DIR).dataframe()` (Ray's own post-hoc API; imports ray, unpickles).

The same is done at 10,000 trials, and the 1,000-trial experiment is uploaded to S3 servers on
loopback (tests/s3/s3_server.py) and inspected there: wall time, peak RSS, requests per trial
(counted by the server) and the ratio to the local run. Wall time and peak RSS come from GNU
time (bench/_measure.py). Run: `make bench` (or `python bench/bench_inspect.py --help`).
Figures of the last run go in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))
from _measure import measure  # noqa: E402

TEMPLATE = REPO / "fixtures" / "tune_healthy" / "ray_results" / "tune_healthy"
ANCHOR = (
    "import sys\n"
    "from ray.tune import ExperimentAnalysis\n"
    "analysis = ExperimentAnalysis(sys.argv[1])\n"
    "frame = analysis.dataframe()\n"
    "print(len(frame), 'rows', file=sys.stderr)\n"
)


def _template_trial() -> tuple[Path, list, list[dict]]:
    state_path = max(TEMPLATE.glob("experiment_state-*.json"))
    state = json.loads(state_path.read_text())
    pair = state["trial_data"][0]
    trial = json.loads(pair[0])
    trial_dir = TEMPLATE / trial["relative_logdir"]
    rows = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]
    return trial_dir, pair, rows


def _result_bytes(rows: list[dict], iterations: int, trial_id: str) -> tuple[bytes, bytes]:
    """result.json and progress.csv for one trial: the real rows, cycled and renumbered."""
    start = rows[0]["timestamp"]
    lines = []
    csv_rows = []
    header = [k for k in rows[0] if k != "config"]
    for i in range(iterations):
        row = dict(rows[i % len(rows)])
        row.update(
            training_iteration=i + 1,
            iterations_since_restore=i + 1,
            trial_id=trial_id,
            timestamp=start + i,
            time_total_s=float(i + 1),
            time_since_restore=float(i + 1),
        )
        lines.append(json.dumps(row))
        csv_rows.append(",".join("" if row.get(k) is None else str(row.get(k)) for k in header))
    result = ("\n".join(lines) + "\n").encode()
    progress = (",".join(header) + "\n" + "\n".join(csv_rows) + "\n").encode()
    return result, progress


def built(dest: Path, shape: str) -> bool:
    """Whether `dest` holds what a builder made for `shape` (its `.bench-shape` says so);
    when not, `dest` is emptied for the builder, which writes `.bench-shape` last."""
    marker = dest / ".bench-shape"
    if marker.exists() and marker.read_text() == shape:
        return True
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    return False


def build(dest: Path, trials: int, iterations: int) -> Path:
    """Write the experiment; reuses dest when it was built with the same shape."""
    shape = f"{trials}x{iterations}"
    if built(dest, shape):
        return dest
    marker = dest / ".bench-shape"
    trial_dir, pair, rows = _template_trial()
    template_trial = json.loads(pair[0])
    template_meta = json.loads(pair[1])
    old_id = template_trial["trial_id"]
    result_template, progress_template = _result_bytes(rows, iterations, old_id)
    for name in ("tuner.pkl", ".validate_storage_marker"):
        if (TEMPLATE / name).exists():
            shutil.copy(TEMPLATE / name, dest / name)
    state_name = max(TEMPLATE.glob("experiment_state-*.json")).name
    with open(dest / state_name, "w") as state_file:
        state_file.write('{"trial_data": [')
        for i in range(trials):
            trial_id = f"{old_id[:5]}_{i:05d}"
            logdir = template_trial["relative_logdir"].replace(old_id, trial_id)
            trial = dict(template_trial, trial_id=trial_id, relative_logdir=logdir)
            meta = dict(template_meta)
            meta["last_result"] = dict(meta["last_result"], training_iteration=iterations)
            entry = [json.dumps(trial), json.dumps(meta)]
            state_file.write(("," if i else "") + json.dumps(entry))
            out = dest / logdir
            out.mkdir()
            (out / "result.json").write_bytes(
                result_template.replace(old_id.encode(), trial_id.encode())
            )
            (out / "progress.csv").write_bytes(
                progress_template.replace(old_id.encode(), trial_id.encode())
            )
            shutil.copy(trial_dir / "params.json", out / "params.json")
            for checkpoint in trial_dir.glob("checkpoint_*"):
                shutil.copytree(checkpoint, out / checkpoint.name)
        stats = json.dumps({"start_time": time.time()})
        state_file.write(f'], "runner_data": {{}}, "stats": {stats}}}')
    marker.write_text(shape)
    return dest


def best_of(
    runs: int, command: list[str], ok_codes: tuple[int, ...] = (0, 1)
) -> tuple[float, float]:
    results = [measure(command, ok_codes) for _ in range(runs)]
    return min(r[0] for r in results), max(r[1] for r in results)


# ExperimentAnalysis must read the sweep: its failure (exit 1) would be timed as a fast run.
ANCHOR_OK = (0,)


def compare_with_anchor(exp: Path, doctor: list[str], runs: int, anchor_runs: int) -> None:
    python = sys.executable
    wall, rss = best_of(runs, [*doctor, str(exp)])
    print(f"ray-doctor inspect:                 {wall:7.2f} s  {rss:6.0f} MB peak RSS")
    if anchor_runs:
        anchor_wall, anchor_rss = best_of(anchor_runs, [python, "-c", ANCHOR, str(exp)], ANCHOR_OK)
        print(
            f"ExperimentAnalysis + dataframe():   {anchor_wall:7.2f} s  {anchor_rss:6.0f} MB peak RSS"
        )
        print(f"speed-up: {anchor_wall / wall:.1f}x (target >= 20x)")


def on_s3(kind: str, exp: Path, doctor: list[str], runs: int, trials: int) -> None:
    """Upload `exp` to an S3 server on loopback and inspect it there and locally, in turns."""
    import os

    from s3.s3_server import start_s3_server

    server = start_s3_server(kind, Path(exp).parents[1])
    try:
        started = time.perf_counter()
        uri = server.upload(exp, server.bucket("bench"), exp.name)
        print(f"{kind}: uploaded in {time.perf_counter() - started:.0f} s")
        os.environ.update(server.env)
        remote, local = [], []
        for _ in range(runs):  # alternate, so load on the shared machine hits both alike
            if kind == "moto":
                with server.counting() as served:
                    remote.append(measure([*doctor, uri]))
                requests = len(served)
            else:
                remote.append(measure([*doctor, uri]))
            local.append(measure([*doctor, str(exp)]))
        wall, rss = min(r[0] for r in remote), max(r[1] for r in remote)
        local_wall = min(r[0] for r in local)
        print(f"  inspect s3:// ({kind}):  {wall:7.2f} s  {rss:6.0f} MB peak RSS", end="")
        if kind == "moto":
            print(f"  {requests} requests, {requests / trials:.2f} per trial", end="")
        print(f"\n  inspect local dir:      {local_wall:7.2f} s")
        print(f"  s3 / local: {wall / local_wall:.1f}x (target <= 3x)")
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--memory-trials", type=int, default=10_000, help="0 skips the check")
    parser.add_argument("--runs", type=int, default=3, help="best wall time of this many")
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--skip-anchor", action="store_true")
    parser.add_argument(
        "--s3", default="rclone,moto", help="S3 servers to compare with ('' skips): rclone, moto"
    )
    args = parser.parse_args()
    args.workdir = args.workdir.resolve()  # ExperimentAnalysis takes no relative path

    python = sys.executable
    # Both sides run from compiled bytecode, as after a wheel install (ray's came with pip;
    # an editable ray-doctor with PYTHONDONTWRITEBYTECODE set would recompile every run).
    subprocess.run([python, "-m", "compileall", "-q", str(REPO / "ray_doctor")], check=True)
    doctor = [python, "-m", "ray_doctor", "inspect", "--format", "json", "-q"]
    print(f"building {args.trials} trials x {args.iterations} iterations ...", flush=True)
    exp = build(args.workdir / "speed" / "bench_exp", args.trials, args.iterations)
    size_mb = sum(p.stat().st_size for p in exp.rglob("*") if p.is_file()) / 2**20
    print(f"experiment: {exp} ({size_mb:.0f} MB)")
    anchor_runs = 0 if args.skip_anchor else max(1, args.runs - 1)
    compare_with_anchor(exp, doctor, args.runs, anchor_runs)

    if args.memory_trials:
        big = build(
            args.workdir / f"mem_{args.memory_trials}x{args.iterations}" / "bench_exp",
            args.memory_trials,
            args.iterations,
        )
        print(f"{args.memory_trials} trials x {args.iterations} iterations:")
        compare_with_anchor(big, doctor, args.runs, min(anchor_runs, 1))
        print("memory: peak RSS as the sweep grows (target <= 150 MB, flat)")
        shapes = [(args.trials, args.iterations), (args.trials, args.iterations * 10)]
        shapes.append((args.memory_trials, args.iterations))
        for trials, iterations in shapes:
            path = build(
                args.workdir / f"mem_{trials}x{iterations}" / "bench_exp", trials, iterations
            )
            wall, rss = measure([*doctor, str(path)])
            print(
                f"  {trials:6d} trials x {iterations:5d} iterations: {wall:6.2f} s  {rss:6.0f} MB"
            )

    for kind in filter(None, args.s3.split(",")):
        print(f"S3 on loopback, {args.trials} trials x {args.iterations} iterations:", flush=True)
        on_s3(kind, exp, doctor, args.runs, args.trials)


if __name__ == "__main__":
    main()
