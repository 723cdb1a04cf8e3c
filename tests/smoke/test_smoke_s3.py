"""Smoke's checkpoint round trip through s3:// on a real S3 server (moto, on loopback)."""

import pyarrow.fs
from smoke_runs import assert_nothing_left, run_smoke, smoke_env


def test_checkpoint_round_trip_through_s3(s3_server, tmp_path):
    bucket = s3_server.bucket("smoke")
    env = smoke_env(tmp_path, **s3_server.env)
    run = run_smoke(
        tmp_path, "--stage", "checkpoint", "--storage-path", f"s3://{bucket}/ray_results", env=env
    )
    assert run.returncode == 0, run.stdout
    stage = run.stage("checkpoint")
    assert stage["status"] == "pass"
    assert f"reported to s3://{bucket}/ray_results" in stage["message"]
    assert stage["details"]["restore"]["ok"]
    # Smoke removes the experiments it wrote into the user's bucket, and only those.
    selector = pyarrow.fs.FileSelector(f"{bucket}/ray_results", allow_not_found=True)
    left = s3_server.filesystem().get_file_info(selector)
    assert [i.base_name for i in left if i.base_name.startswith("ray-doctor-smoke-")] == []
    assert_nothing_left(run)


def test_a_missing_bucket_is_named(s3_server, tmp_path):
    env = smoke_env(tmp_path, **s3_server.env)
    run = run_smoke(
        tmp_path,
        "--stage",
        "checkpoint",
        "--storage-path",
        "s3://no-such-bucket-ray-doctor/r",
        env=env,
    )
    assert run.returncode == 1
    (finding,) = run.findings("storage-unreachable")
    assert "s3://no-such-bucket-ray-doctor/r cannot be written" in finding["message"]
