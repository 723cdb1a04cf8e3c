"""S3 failures (403, missing bucket, unreachable or silent endpoint) end in one line naming the
URI and exit 2, with the reason in the JSON report's errors[]: never a traceback, never a hang."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from conftest import experiment_dir, run_cli, validate


def could_not_run(proc) -> dict:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    report = validate(json.loads(proc.stdout))
    assert report["summary"]["exit_code"] == 2
    return report


def test_refused_credentials(fixtures: Path, s3_server) -> None:
    uri = s3_server.upload(experiment_dir(fixtures, "tune_trial_error"), s3_server.bucket(), "e")
    with s3_server.enforce_auth():
        proc = run_cli("inspect", "--format", "json", uri, env=s3_server.env)
    report = could_not_run(proc)
    shown = uri.split("?")[0]
    assert shown in proc.stderr and "403" in proc.stderr
    assert "AWS_ACCESS_KEY_ID" in proc.stderr  # says what to check
    assert report["target"]["path"] == shown
    assert report["errors"][0]["path"] == shown  # no endpoint, no credentials


def test_missing_bucket(s3_server) -> None:
    proc = run_cli(
        "inspect", "--format", "json", s3_server.uri("no-such-bucket", "exp"), env=s3_server.env
    )
    report = could_not_run(proc)
    assert "s3://no-such-bucket/exp" in proc.stderr
    assert "bucket 'no-such-bucket' does not exist" in proc.stderr
    assert "endpoint_override" not in proc.stderr
    assert report["errors"]


def test_missing_experiment_in_existing_bucket(s3_server) -> None:
    proc = run_cli("inspect", s3_server.uri(s3_server.bucket(), "nothing/here"), env=s3_server.env)
    assert proc.returncode == 2
    assert "no such file or directory" in proc.stderr and "Traceback" not in proc.stderr


def test_unreachable_endpoint(s3_server) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = f"s3://bucket/exp?endpoint_override=127.0.0.1:{port}&scheme=http"
    proc = run_cli("inspect", "--format", "json", uri, env=s3_server.env)
    could_not_run(proc)
    assert "s3://bucket/exp" in proc.stderr and "cannot connect" in proc.stderr


def test_silent_endpoint_times_out(s3_server) -> None:
    """An endpoint that accepts connections and never answers: bounded by the request
    timeout (RAY_DOCTOR_S3_TIMEOUT_S) and the retry limit, then one line."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        uri = f"s3://bucket/exp?endpoint_override=127.0.0.1:{port}&scheme=http"
        started = time.monotonic()
        proc = run_cli(
            "inspect",
            "--format",
            "json",
            uri,
            env={**s3_server.env, "RAY_DOCTOR_S3_TIMEOUT_S": "1"},
        )
        elapsed = time.monotonic() - started
    could_not_run(proc)
    assert "did not answer in time" in proc.stderr
    assert elapsed < 60  # three attempts of one second each, plus start-up; not a hang
