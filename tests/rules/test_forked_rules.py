"""The rules of a big failing sweep, half of them in a forked process: the same findings, in
the same order, as one process finds."""

from __future__ import annotations

import json
import subprocess
import sys

from terminal import large_sweep

# Run in a process of its own: a pytest-xdist worker has threads, and the engine never forks
# beside a thread.
COMPARE = r"""
import dataclasses, json, sys
from ray_doctor.rules import _forked, run_rules
from ray_doctor.scan import scan

forks = []
real_pool = _forked.forked_pool
_forked.forked_pool = lambda n: forks.append(n) or real_pool(n)
result = scan(sys.argv[1])
ended = sum(1 for t in result.experiments[0].trials if t.failures)
forked = run_rules(result)
# Every rule in the forked process, trial-error's 400 findings included.
take = _forked._take
_forked._take = lambda bounds, front: None if front else take(bounds, front)
all_forked = run_rules(result)
_forked._take = take
_forked.PARALLEL_FAILURES = 10**9
alone = run_rules(result)
as_json = lambda found: [json.dumps(dataclasses.asdict(f), default=str) for f in found]
print(json.dumps({"forks": len(forks), "ended": ended, "forked": as_json(forked),
                  "all_forked": as_json(all_forked), "alone": as_json(alone)}))
"""


def test_a_big_failing_sweep_gets_the_same_findings_from_forked_rules(fixtures, tmp_path):
    sweep = large_sweep(fixtures, tmp_path, 1200)  # one trial in three raised: 400 failures
    proc = subprocess.run(
        [sys.executable, "-c", COMPARE, str(sweep)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ended"] >= 400
    assert out["forks"] == 2, "the sweep is big enough for the rules to fork"
    assert out["forked"] == out["alone"]
    assert out["all_forked"] == out["alone"]
    rules = {json.loads(f)["rule"] for f in out["forked"]}
    assert "trial-error" in rules
