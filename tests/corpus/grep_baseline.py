"""The rules against a plain grep, on the same corpus: where a few patterns do as well.

`python tests/corpus/grep_baseline.py` prints, per expected rule, how many cases the rules get
right (cause found and headline right, as `measure.py` scores them) and how many a first-match
grep of one pattern per label gets right (for `other`: the grep matches nothing), then the cases
the grep gets right and the rules do not. A grep knows no near-miss, so it loses on `other`; a
label where it wins on the specific cases is a place to look for an emitter the rules lack.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure

# One pattern per label, the words a user would grep for first; the first that matches wins.
GREP = (
    ("oom-ray-memory-monitor", r"running low on memory|memory monitor"),
    ("oom-cuda", r"CUDA out of memory|OutOfMemoryError|out of memory"),
    ("oom-killed-by-os", r"OOM killer|Killed process|exit code 137|\bKilled\b|SIGKILL|oom-kill"),
    ("collective-timeout", r"collective operation timeout|timed out|Timeout"),
    (
        "nccl-error",
        r"NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|NCCL WARN",
    ),
    ("port-conflict", r"Address already in use|EADDRINUSE"),
    ("disk-full", r"No space left on device|ENOSPC|OutOfDiskError"),
    (
        "state-dict-mismatch",
        r"Missing key\(s\) in state_dict|Unexpected key\(s\)|size mismatch for",
    ),
    ("checkpoint-corrupt", r"PytorchStreamReader failed|failed finding central directory|corrupt"),
    ("checkpoint-missing", r"[Cc]heckpoint.*(?:not found|does not exist|No such file)"),
    ("missing-module", r"No module named"),
    ("device-mismatch", r"Expected all tensors to be on the same device"),
    ("metric-nonfinite", r"\bnan\b|\bNaN\b|\binf\b"),
    ("trial-incomplete", r"Trials did not complete"),
    ("resources-insufficient", r"cannot be scheduled|[Ii]nsufficient resources|infeasible"),
    ("cluster-unreachable", r"Failed to connect to GCS|Could not connect|Unable to connect"),
    ("storage-unreachable", r"AccessDenied|NoSuchBucket|NoCredentialsError|403 Forbidden"),
    ("shm-too-small", r"/dev/shm|shared memory|Bus error"),
)
_COMPILED = tuple((label, re.compile(pattern)) for label, pattern in GREP)


def grep_label(text: str) -> str | None:
    return next((label for label, pattern in _COMPILED if pattern.search(text)), None)


def grep_right(case: measure.Case) -> bool:
    found = grep_label(case.text)
    return found is None if case.expect == measure.OTHER else found == case.expect


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="case files or dirs (default: every case)")
    args = parser.parse_args(argv)
    cases = [
        case
        for path in map(Path, args.paths or [str(measure.CASES)])
        for case in (measure.load_cases(path) if path.is_dir() else [measure.parse_case(path)])
    ]
    total, rules, grep = Counter(), Counter(), Counter()
    grep_only = []
    for outcome in measure.run(cases):
        label = outcome.case.expect
        total[label] += 1
        rules[label] += outcome.passed
        grep[label] += grep_right(outcome.case)
        if grep_right(outcome.case) and not outcome.passed:
            grep_only.append(f"{outcome.case.name}: {label}, rules' headline {outcome.headline}")
    print(f"{'expected':<26} {'cases':>5} {'rules':>6} {'grep':>5}")
    for label in sorted(total):
        print(f"{label:<26} {total[label]:>5} {rules[label]:>6} {grep[label]:>5}")
    specific = [label for label in total if label != measure.OTHER]
    print(
        f"\nall {sum(total.values())}: rules {sum(rules.values())}, grep {sum(grep.values())}; "
        f"without `other` ({sum(total[k] for k in specific)}): rules "
        f"{sum(rules[k] for k in specific)}, grep {sum(grep[k] for k in specific)}"
    )
    print(f"\nright by grep only ({len(grep_only)}):", *grep_only, sep="\n  ")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
