"""ray-doctor-errors.jsonl in a Train V2 run dir (docs/train-errors.md), read by `inspect`.

The records are what the Train callback writes for fixtures/train_v2_rank_failure's real
failure (tests/integrations/test_callbacks.py writes them with a real run); here they are
added to a copy of that run dir to check how `inspect` combines them with other evidence.
"""

from __future__ import annotations

import json
import shutil

from conftest import experiment_dir, findings_of, inspect_json

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/home/ray/fixture_jobs/generate.py", line 725, in before_epoch\n'
    '    raise ValueError("Found NaN in input batch on rank 1 (epoch 2, step 0)")\n'
    "ValueError: Found NaN in input batch on rank 1 (epoch 2, step 0)\n"
)


def _record(**fields) -> str:
    record = {
        "version": 1,
        "run_id": "e9db7570b4104a6387ffb1eba5f158c4",
        "attempt": 1,
        "max_failures": 0,
        "rank": 1,
        "time": "2026-11-22T06:31:33.100+00:00",
        "type": "ValueError",
        "message": "Found NaN in input batch on rank 1 (epoch 2, step 0)",
        "traceback": TRACEBACK,
    }
    return json.dumps({**record, **fields})


def _run_dir(fixtures, tmp_path, *lines: str):
    run = tmp_path / "train_v2_rank_failure"
    shutil.copytree(experiment_dir(fixtures, "train_v2_rank_failure"), run)
    (run / "ray-doctor-errors.jsonl").write_text("".join(line + "\n" for line in lines))
    return run


def test_the_driver_log_and_the_file_name_one_failure_not_two(fixtures, tmp_path):
    run = _run_dir(fixtures, tmp_path, _record())
    driver_log = fixtures / "train_v2_rank_failure" / "driver.log"
    code, report = inspect_json(str(run), "--logs", str(driver_log))
    assert code == 1
    (finding,) = findings_of(report, "trial-error")
    assert "rank 1" in finding["message"] and "generate.py:725" in finding["message"]
    assert report["trials"][0]["failures"] == 1


def test_retried_attempts_are_not_a_failed_run_and_bad_lines_are_reported(fixtures, tmp_path):
    run = _run_dir(
        fixtures, tmp_path, _record(max_failures=2), "not json", _record(attempt=2, max_failures=2)
    )
    code, report = inspect_json(str(run))
    # Two attempts failed, max_failures=2 allows a third: Train was still retrying.
    assert report["trials"][0]["status"] == "UNKNOWN"
    assert not findings_of(report, "trial-error")
    assert [e["reason"] for e in report["errors"]] == ["lines that are not rank error records: 2"]
    assert code == 0


# gloo's word (gloo/transport/tcp/pair.cc) on a rank whose all_reduce partner went away.
PEER_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/home/ray/fixture_jobs/generate.py", line 608, in train_loop_per_worker\n'
    "    dist.all_reduce(t)\n"
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
    "peer [192.0.2.2]:5321\n"
)


def test_a_ranks_own_error_ends_the_run_not_the_peer_it_took_down(fixtures, tmp_path):
    """The callback writes an attempt's ranks in rank order, at one time: rank 0's own error
    comes first and rank 1's "Connection closed by peer" after it. The run failed of rank 0's
    error; rank 1 only lost its partner."""
    own = TRACEBACK.replace("rank 1", "rank 0")
    run = _run_dir(
        fixtures,
        tmp_path,
        _record(
            rank=0, message="Found NaN in input batch on rank 0 (epoch 2, step 0)", traceback=own
        ),
        _record(
            rank=1,
            type="RuntimeError",
            message=PEER_TRACEBACK.splitlines()[-1].split(": ", 1)[1],
            traceback=PEER_TRACEBACK,
        ),
    )
    code, report = inspect_json(str(run))
    assert code == 1
    (finding,) = findings_of(report, "trial-error")
    assert "rank 0 with ValueError" in finding["message"]
    assert "generate.py:725" in finding["message"]
    assert report["trials"][0]["last_error"].startswith("ValueError")
