"""Benchmark: rank attribution over 64 ranks x 2,000 Flight Recorder entries (target < 1 s).

Synthesises the dumps from a real one (`fixtures/train_v2_fr_skipped_collective/fr_dumps/
rank_0.json`, gloo, torch 2.13): every entry is a copy of a real entry with its sequence
number, record id, sizes and time rewritten; each rank's ring buffer holds its last 2,000
collectives; rank 37 stops one collective short of the others (the hang to find). Written
under bench/out/fr/ as JSON and as pickle (plain dicts, as torch writes them), then:

- in this process, best of several: read every dump of a dir (JSON parse, or the symbolic
  pickle machine for the pickle form) and attribute (`ray_doctor.collectives.attribute`);
- `ray-doctor inspect DIR --format json` end to end, in its own process (`_measure.py`).

`python bench/bench_flight_recorder.py --help`; figures go in bench/README.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import pickle
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
from _measure import measure  # noqa: E402

SOURCE = REPO / "fixtures" / "train_v2_fr_skipped_collective" / "fr_dumps" / "rank_0.json"
LAGGING_RANK = 37


def build(out: Path, ranks: int, entries: int) -> None:
    real = json.loads(SOURCE.read_text())
    template = real["entries"][-1]
    last_seq = entries + 500  # a ring buffer that has wrapped: it holds seqs 501..2500
    for fmt in ("json", "pickle"):
        (out / fmt).mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        stop = last_seq - 1 if rank == LAGGING_RANK else last_seq
        dump = copy.deepcopy(real)
        dump["pg_config"] = {"": {"desc": "", "name": "", "ranks": str(list(range(ranks)))}}
        dump["entries"] = []
        for seq in range(stop - entries + 1, stop + 1):
            entry = dict(template)
            entry.update(
                collective_seq_id=seq,
                op_id=seq,
                record_id=seq - 1,
                input_sizes=[[1024 if seq % 3 else 1]],
                output_sizes=[[1024 if seq % 3 else 1]],
                time_created_ns=template["time_created_ns"] + seq * 1_000_000,
            )
            dump["entries"].append(entry)
        (out / "json" / f"rank_{rank}.json").write_text(json.dumps(dump))
        pickled = {**dump, "entries": dump["entries"]}
        (out / "pickle" / f"rank_{rank}").write_bytes(pickle.dumps(pickled, protocol=4))


def analyse_dir(path: Path) -> str:
    from ray_doctor.collectives import attribute
    from ray_doctor.rules.collective_desync import describe
    from ray_doctor.scan._flight_recorder import read_evidence_dir
    from ray_doctor.storage import open_storage

    storage, real = open_storage(str(path))
    evidence, errors = read_evidence_dir(storage, real)
    assert not errors, errors
    return describe(attribute(evidence))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out" / "fr")
    args = parser.parse_args()
    out = args.workdir / f"{args.ranks}x{args.entries}"
    if not (out / "pickle" / f"rank_{args.ranks - 1}").exists():
        build(out, args.ranks, args.entries)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**20
    print(f"{args.ranks} ranks x {args.entries} entries under {out} ({size:.0f} MB, both forms)")
    for fmt in ("json", "pickle"):
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            message = analyse_dir(out / fmt)
            times.append(time.perf_counter() - started)
        assert f"Rank {LAGGING_RANK} never reached" in message, message
        wall, rss = measure([sys.executable, "-m", "ray_doctor", "inspect", str(out / fmt), "-q"])
        print(
            f"{fmt:6}  read + attribute {min(times):.2f} s (best of {args.runs})   "
            f"inspect end to end {wall:.2f} s, peak RSS {rss:.0f} MB"
        )
    print(message[:200])


if __name__ == "__main__":
    main()
