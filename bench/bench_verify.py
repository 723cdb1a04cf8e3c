"""Benchmark: `ray-doctor verify-checkpoint` on a 2 GB torch checkpoint against `cat FILE`.

Writes a real torch.save checkpoint of about 2 GB (eight 256 MB float32 tensors plus their Adam
state would be 6 GB, so: the weights only) under bench/out/, warms the page cache, then runs
in separate processes, best of several:

- `cat FILE > /dev/null`, the floor for reading every byte;
- `ray-doctor verify-checkpoint FILE --no-values` (structure, pickle, every member's CRC);
- `ray-doctor verify-checkpoint FILE` (plus NaN / Inf counting of every tensor).

Target: the CRC / structure pass reads at >= 50 % of `cat`'s throughput, peak RSS far below
the file size. `python bench/bench_verify.py --help`; figures go in bench/README.md.

`--s3` instead uploads the checkpoint to the suite's moto server (tests/s3/s3_server.py) and
counts the requests `verify-checkpoint s3://...` makes, at the server (HEAD / GET).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from _measure import measure  # noqa: E402


def build(path: Path, gigabytes: float) -> None:
    if path.exists() and abs(path.stat().st_size - gigabytes * 2**30) < 2**26:
        return
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = max(1, round(gigabytes * 4))
    numel = int(gigabytes * 2**30 / 4 / tensors)
    generator = torch.Generator().manual_seed(0)
    state = {f"layer{i}.weight": torch.randn(numel, generator=generator) for i in range(tensors)}
    torch.save(state, path)


def best(runs: int, command: list[str] | str) -> tuple[float, float]:
    results = [measure(command) for _ in range(runs)]
    return min(r[0] for r in results), max(r[1] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--s3", action="store_true", help="count requests on a moto S3 server")
    parser.add_argument("--build-only", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_only:
        build(Path(args.build_only[1]), float(args.build_only[0]))
        return
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "ray_doctor")], check=True)
    path = args.workdir / "verify" / "big.pt"
    print(f"building a {args.gigabytes:g} GB checkpoint ...", flush=True)
    # Built in a child: a parent holding 2 GB of tensors would not be a fair neighbour.
    subprocess.run(
        [sys.executable, __file__, "--build-only", str(args.gigabytes), str(path)], check=True
    )
    size_gb = path.stat().st_size / 2**30
    if args.s3:
        count_s3_requests(path, size_gb)
        return
    measure(f"cat {path} > /dev/null")  # warm the page cache
    cat_wall, _ = best(args.runs, f"cat {path} > /dev/null")
    doctor = [
        sys.executable,
        "-m",
        "ray_doctor",
        "verify-checkpoint",
        str(path),
        "-f",
        "json",
        "-q",
    ]
    crc_wall, crc_rss = best(args.runs, [*doctor, "--no-values"])
    values_wall, values_rss = best(args.runs, doctor)
    print(f"file: {path} ({size_gb:.2f} GB)")
    print(f"cat > /dev/null:                   {cat_wall:6.2f} s  {size_gb / cat_wall:5.2f} GB/s")
    print(
        f"verify-checkpoint --no-values:     {crc_wall:6.2f} s  {size_gb / crc_wall:5.2f} GB/s"
        f"  {crc_rss:5.0f} MB peak RSS  ({cat_wall / crc_wall:.0%} of cat; target >= 50%)"
    )
    print(
        f"verify-checkpoint (values too):    {values_wall:6.2f} s  {size_gb / values_wall:5.2f} GB/s"
        f"  {values_rss:5.0f} MB peak RSS"
    )


def count_s3_requests(path: Path, size_gb: float) -> None:
    """Upload `path` to a moto server, verify it there, and print the requests served."""
    import collections
    import os

    sys.path.insert(0, str(REPO / "tests" / "s3"))
    from s3_server import client_env, start_s3_server

    server = start_s3_server("moto")
    try:
        bucket = server.bucket("verify")
        key = f"{bucket}/checkpoint/{path.name}"
        with (
            path.open("rb") as source,
            server.filesystem(request_timeout=600).open_output_stream(key) as out,
        ):
            while chunk := source.read(64 << 20):  # streamed: the bench holds no 1 GB copy
                out.write(chunk)
        uri = server.uri(bucket, f"checkpoint/{path.name}")
        command = [sys.executable, "-m", "ray_doctor", "verify-checkpoint", uri, "-f", "json"]
        env = {**os.environ, **client_env(server.endpoint)}
        with server.counting() as served:
            started = time.perf_counter()
            run = subprocess.run(command, capture_output=True, text=True, env=env)
            wall = time.perf_counter() - started
        if run.returncode not in (0, 1):
            raise SystemExit(f"verify-checkpoint failed ({run.returncode}): {run.stderr[-2000:]}")
        methods = collections.Counter(method for method, _ in served)
        print(f"file: {path} ({size_gb:.2f} GB) on moto at {server.endpoint}")
        print(
            f"verify-checkpoint s3://...: {len(served)} requests "
            f"({', '.join(f'{n} {m}' for m, n in sorted(methods.items()))}) in {wall:.1f} s"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
