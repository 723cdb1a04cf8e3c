"""storage-unreachable: Ray's storage check, and multi-node runs on a local storage_path."""

import json
import shutil

import pytest
from conftest import experiment_dir, findings_of, inspect_json


def test_ray_storage_check_failed(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_storage_unreachable")))
    assert code == 1
    (finding,) = findings_of(report, "storage-unreachable")
    assert "Unable to set up cluster storage" in finding["message"]
    assert "s3://" in finding["fix"]


def test_multi_node_run_on_a_local_path(fixtures, tmp_path):
    exp = tmp_path / "tune_healthy"
    shutil.copytree(experiment_dir(fixtures, "tune_healthy"), exp)
    state_path = next(exp.glob("experiment_state-*.json"))
    state = json.loads(state_path.read_text())
    # Hand edit: say the second trial ran on another node.
    meta = json.loads(state["trial_data"][1][1])
    meta["last_result"]["node_ip"] = "10.0.0.7"
    state["trial_data"][1][1] = json.dumps(meta)
    state_path.write_text(json.dumps(state))
    code, report = inspect_json(str(exp))
    (finding,) = findings_of(report, "storage-unreachable")
    assert finding["severity"] == "warning" and code == 0
    assert "2 nodes" in finding["message"]


def test_near_miss_single_node_local_storage(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert not findings_of(report, "storage-unreachable")


@pytest.mark.ray_compat
def test_smoke_names_a_storage_path_it_cannot_write(smoke_port_and_storage):
    run, _ = smoke_port_and_storage
    assert run.returncode == 1
    (finding,) = run.findings("storage-unreachable")
    assert "/proc/ray-doctor-smoke-unwritable/results cannot be written" in finding["message"]
    # The round trip itself still ran, on a private dir, which pins the blame on the path.
    assert "the storage path is what fails" in finding["message"]
    assert run.stage("checkpoint")["status"] == "fail"


@pytest.mark.ray_compat
def test_smoke_near_miss_a_writable_storage(smoke_cpu):
    assert not smoke_cpu.findings("storage-unreachable")


def test_cloud_credentials_that_cannot_be_had():
    """google-auth failing to get a GCE service account's token (ray #21030: gs:// through
    gcsfs) is storage out of reach; its retry warnings alone are not."""
    text = (
        "google.auth.exceptions.RefreshError: Failed to retrieve http://metadata.google.internal/"
        "computeMetadata/v1/instance/service-accounts/default/?recursive=true \n"
        "from the Google Compute Enginemetadata service. Compute Engine Metadata server "
        "unavailable\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert report["findings"][0]["rule"] == "storage-unreachable"
    warning = (
        "2024-09-16 11:54:33 WARNING Compute Engine Metadata server unavailable on attempt 1 of "
        "3. Reason: timed out\n"
    )
    _, report = inspect_json("-", stdin=warning)
    assert not findings_of(report, "storage-unreachable")


@pytest.mark.parametrize(
    "line",
    [
        # pyarrow before its named S3 errors: the AWS SDK's number (100 is UNKNOWN)
        "OSError: When reading information for key 'data.parquet' in bucket 'b': AWS Error "
        "[code 100]: No response body.",
        # Ray 0.8-1.x moving a checkpoint between nodes with rsync (ray #9558)
        "ray.tune.error.TuneError: Trial T_00001: Checkpoint path /root/ray_results/e/T_00001/"
        "checkpoint_1/ not found after successful sync down.",
    ],
)
def test_older_wordings(line):
    _, report = inspect_json("-", stdin=f"Traceback (most recent call last):\n{line}\n")
    assert findings_of(report, "storage-unreachable")


def test_near_miss_tunes_sync_client_used_after_close():
    # A Tune 1.x bug (ray #13256, #17506), logged as a failed sync.
    text = (
        "2021-01-07 06:03:17,786\tERROR syncer.py:190 -- Sync execution failed.\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.8/site-packages/ray/tune/sync_client.py", line 201, in '
        "_get_logfile\n"
        "    raise RuntimeError(\n"
        "RuntimeError: [internalerror] The client has been closed. Please report this "
        "stacktrace + your cluster configuration on Github!\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "storage-unreachable")
    assert findings_of(report, "trial-error")


def test_near_miss_a_sync_that_ran_out_of_file_descriptors():
    # ray #12227 as posted: Tune's syncer could not even start its command (EMFILE).
    from conftest import corpus_excerpt

    text = corpus_excerpt("ray/12227-tune-sync-too-many-open-files.txt")
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "storage-unreachable")
    assert report["findings"], "the error is still reported, as it stands"


def test_an_s3_endpoint_that_cannot_be_reached_but_not_another_aws_service():
    s3 = (
        "botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "
        '"https://my-bucket.s3.us-west-2.amazonaws.com/runs/exp1/checkpoint_000003/model.pt"\n'
    )
    _, report = inspect_json("-", stdin=s3)
    assert report["findings"][0]["rule"] == "storage-unreachable"
    # The cluster launcher failing to reach EC2 is not the run's storage.
    ec2 = (
        "botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "
        '"https://ec2.us-west-2.amazonaws.com/"\n'
    )
    _, report = inspect_json("-", stdin=ec2)
    assert not findings_of(report, "storage-unreachable")


def test_determined_validating_its_checkpoint_storage():
    """Determined #7869: the shared_fs checkpoint path was not writable in the container."""
    text = (
        "[a5884739] [36] root: Checkpoint storage validation failed: [Errno 13] Permission "
        "denied: '/determined_shared_fs/261390dd-c308-4ce3-ac99-77d52f744f8b' <error>\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert report["findings"][0]["rule"] == "storage-unreachable"
