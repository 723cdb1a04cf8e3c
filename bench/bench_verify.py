"""Benchmark: `ray-doctor verify-checkpoint` on a 2 GB torch checkpoint against `cat FILE`.

Writes a real torch.save checkpoint of about 2 GB (eight 256 MB float32 tensors plus their Adam
state would be 6 GB, so: the weights only) under bench/out/, warms the page cache, then runs
in separate processes, best of several:

- `cat FILE > /dev/null`, the floor for reading every byte;
- `ray-doctor verify-checkpoint FILE --no-values` (structure, pickle, every member's CRC);
- `ray-doctor verify-checkpoint FILE` (plus NaN / Inf counting of every tensor).

Target: the CRC / structure pass reads at >= 50 % of `cat`'s throughput, peak RSS far below
the file size. `python bench/bench_verify.py --help`; figures go in bench/README.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
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


if __name__ == "__main__":
    main()
