"""inspect and verify-checkpoint on s3:// against a real S3 server (moto's) on loopback.

The fixtures Ray wrote are uploaded with pyarrow.fs; what ray-doctor reports from the bucket
must be what it reports from the local copy, with s3:// URIs in place of local paths.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO, experiment_dir, run_cli, validate

sys.path.insert(0, str(REPO / "bench"))
from bench_inspect import build


def inspect_s3(s3_server, *args: str) -> tuple[int, dict, str]:
    proc = run_cli("inspect", "--format", "json", *args, env=s3_server.env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, validate(json.loads(proc.stdout)), proc.stderr


def essentials(report: dict) -> dict:
    """What a user reads off a report, without paths and times."""
    return {
        "layout": report["target"]["layout"],
        "summary": {k: v for k, v in report["summary"].items() if k != "errors"},
        "trials": sorted(
            (t["trial_id"], t["status"], t["iterations"], t["failures"], t["last_checkpoint"])
            for t in report["trials"]
        ),
        "findings": sorted(
            (f["rule"], f["severity"], f.get("trial_id") or "", f["message"])
            for f in report["findings"]
        ),
    }


@pytest.mark.parametrize(
    "scenario", ["tune_trial_error", "tune_nan_metrics", "train_v2_healthy", "tune_recovered"]
)
def test_inspect_s3_reports_what_local_reports(fixtures: Path, s3_server, scenario: str) -> None:
    local = experiment_dir(fixtures, scenario)
    bucket = s3_server.bucket()
    uri = s3_server.upload(local, bucket, f"ray_results/{scenario}")

    code, remote, _ = inspect_s3(s3_server, uri)
    local_code, local_report, _ = inspect_s3(s3_server, str(local))

    assert code == local_code
    assert essentials(remote) == essentials(local_report)
    assert remote["target"]["path"] == f"s3://{bucket}/ray_results/{scenario}"
    # Evidence points into the bucket, by URI, never at a local path or the endpoint.
    paths = [e["path"] for f in remote["findings"] for e in f["evidence"]]
    paths += [t["path"] for t in remote["trials"] if t.get("path")]
    assert all("endpoint_override" not in p for p in paths)
    assert not any(p.startswith(str(fixtures)) for p in paths)
    assert any(p.startswith(f"s3://{bucket}/ray_results/{scenario}") for p in paths)


def test_plain_s3_uri_uses_the_aws_environment(fixtures: Path, s3_server) -> None:
    """s3://bucket/path with the endpoint and credentials in AWS_* variables, as Ray runs."""
    bucket = s3_server.bucket()
    s3_server.upload(experiment_dir(fixtures, "tune_trial_error"), bucket, "tune_trial_error")

    code, report, _ = inspect_s3(s3_server, f"s3://{bucket}/tune_trial_error")

    assert code == 1
    assert [f["rule"] for f in report["findings"]] == ["trial-error"]


def test_storage_path_with_many_experiments(fixtures: Path, s3_server) -> None:
    scenarios = ["tune_trial_error", "tune_healthy", "tune_trial_stalled", "train_v2_healthy"]
    bucket = s3_server.bucket()
    for scenario in scenarios:
        s3_server.upload(experiment_dir(fixtures, scenario), bucket, f"results/{scenario}")

    code, report, _ = inspect_s3(s3_server, s3_server.uri(bucket, "results"))

    assert code == 1
    assert report["target"]["layout"] == "storage"
    assert sorted(e["name"] for e in report["experiments"]) == sorted(scenarios)
    singles = [inspect_s3(s3_server, str(experiment_dir(fixtures, s)))[1] for s in scenarios]
    assert report["summary"]["trials"] == sum(r["summary"]["trials"] for r in singles)
    assert sorted(f["rule"] for f in report["findings"]) == sorted(
        f["rule"] for r in singles for f in r["findings"]
    )


def test_verify_checkpoint_all_on_s3(fixtures: Path, s3_server) -> None:
    local = experiment_dir(fixtures, "tune_corrupt_checkpoint")
    uri = s3_server.upload(local, s3_server.bucket(), "tune_corrupt_checkpoint")

    remote = run_cli("verify-checkpoint", "--all", "--format", "json", uri, env=s3_server.env)
    here = run_cli("verify-checkpoint", "--all", "--format", "json", str(local))

    assert "Traceback" not in remote.stderr, remote.stderr
    assert remote.returncode == here.returncode == 1
    remote_report, local_report = json.loads(remote.stdout), json.loads(here.stdout)
    assert sorted((f["rule"], f.get("trial_id")) for f in remote_report["findings"]) == sorted(
        (f["rule"], f.get("trial_id")) for f in local_report["findings"]
    )
    assert "checkpoint-corrupt" in {f["rule"] for f in remote_report["findings"]}


def _requests_for(s3_server, tmp_path: Path, trials: int) -> tuple[list, list]:
    """(requests that name a trial dir, the others) served for one inspect of a sweep."""
    local = build(tmp_path / f"sweep{trials}" / "sweep", trials, 20)
    uri = s3_server.upload(local, s3_server.bucket(), "sweep")
    with s3_server.counting() as served:
        code, report, _ = inspect_s3(s3_server, uri)
    assert code == 0 and report["summary"]["trials"] == trials
    per_trial = [r for r in served if "/train_model_" in r[1]]
    return per_trial, [r for r in served if r not in per_trial]


def test_requests_per_trial_are_few_and_constant(s3_server, tmp_path: Path) -> None:
    """Counted at the server: no listing per trial, no params.json (the state has the
    config), no progress.csv next to a result.json: one HEAD and one GET of result.json."""
    small_trials, small_rest = _requests_for(s3_server, tmp_path, 10)
    large_trials, large_rest = _requests_for(s3_server, tmp_path, 50)

    assert len(small_trials) == 2 * 10
    assert len(large_trials) == 2 * 50
    assert {(m, p.rsplit("/", 1)[-1]) for m, p in large_trials} == {
        ("HEAD", "result.json"),
        ("GET", "result.json"),
    }
    # Listing the experiment and reading its state cost the same for 10 trials as for 50.
    assert len(small_rest) == len(large_rest) <= 8


@pytest.mark.parametrize("scenario", ["healthy", "bitflip", "nonfinite"])
def test_verify_checkpoint_on_s3_takes_a_few_requests(fixtures: Path, s3_server, scenario) -> None:
    # A real torch checkpoint: its size (HEAD), then its central directory, local headers and
    # every member's bytes for the CRC pass through one read-ahead GET.
    local = fixtures / "checkpoints" / scenario
    uri = s3_server.upload(local, s3_server.bucket(), scenario)
    path, _, query = uri.partition("?")
    with s3_server.counting() as served:
        proc = run_cli(
            "verify-checkpoint", "--format", "json", f"{path}/checkpoint.pt?{query}",
            env=s3_server.env,
        )  # fmt: skip
    here = run_cli("verify-checkpoint", "--format", "json", str(local / "checkpoint.pt"))
    assert proc.returncode == here.returncode, proc.stderr
    assert [f["rule"] for f in json.loads(proc.stdout)["findings"]] == [
        f["rule"] for f in json.loads(here.stdout)["findings"]
    ]
    assert len(served) <= 3, served
