"""The real GPU failures: fixtures written by Ray 2.60 and torch 2.11 (CUDA 13, NCCL 2.28.9) on
an H100 (`fixtures/generate.py`'s GPU scenarios). CI has no GPU; these are the texts that
torch, NCCL and Ray printed there, read the way a user would read them after the run."""

from conftest import experiment_dir, findings_of, inspect_json


def _inspect(fixtures, scenario: str, *logs: str) -> tuple[int, dict]:
    base = fixtures / scenario
    extra = [arg for log in logs for arg in ("--logs", str(base / log))]
    return inspect_json(str(experiment_dir(fixtures, scenario)), *extra)


def test_a_tune_trial_out_of_gpu_memory(fixtures):
    code, report = _inspect(fixtures, "tune_oom_cuda")
    assert code == 1
    (finding,) = findings_of(report, "oom-cuda")
    assert finding["trial_id"].endswith("_00001"), "the batch_size=2**21 trial, not the other"
    assert "tried to allocate 512.00 GiB" in finding["message"]
    assert "batch_size=2097152" in finding["message"]
    # 512 GiB on a 79 GiB GPU: no saving trick fits it, so the fix starts with the sizes.
    assert "6.5x the whole GPU" in finding["message"]
    assert finding["fix"].startswith("Check the sizes behind that one allocation")
    assert [t["status"] for t in report["trials"]].count("TERMINATED") == 1


def test_an_allocation_that_fits_the_gpu_gets_the_usual_fix():
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.18 GiB of which 1.06 GiB is free.\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "oom-cuda")
    assert "whole GPU" not in finding["message"]
    assert finding["fix"].startswith("Lower the batch size")


def test_a_train_v2_rank_out_of_gpu_memory(fixtures):
    for logs in (["driver.log"], ["session_logs"]):
        code, report = _inspect(fixtures, "train_v2_oom_cuda", *logs)
        assert code == 1, logs
        (finding,) = findings_of(report, "oom-cuda")
        assert "on rank 0" in finding["message"] and "512.00 GiB" in finding["message"]


def test_two_train_workers_on_one_gpu_is_an_nccl_duplicate_gpu(fixtures):
    code, report = _inspect(fixtures, "train_v2_nccl_shared_gpu", "driver.log")
    assert code == 1
    (finding,) = findings_of(report, "nccl-error")
    assert "Duplicate GPU detected : rank 0 and rank 1" in finding["message"]
    assert finding["message"].count("Duplicate GPU detected") == 1, "said once"
    assert "NCCL 2.28.9" in finding["message"]
    # The cause is in the text: the fix is about GPUs per worker, not the network.
    assert "GPU of its own" in finding["fix"] and "NCCL_SOCKET_IFNAME" not in finding["fix"]
    assert report["findings"][0]["rule"] == "nccl-error"


def test_a_cuda_layer_called_on_a_cpu_batch(fixtures):
    code, report = _inspect(fixtures, "tune_device_mismatch_cuda")
    assert code == 1
    (finding,) = findings_of(report, "device-mismatch")
    # torch 2.11's wording: "but got mat1 is on cpu, different from other tensors on cuda:0"
    assert "mixed tensors on cpu and cuda:0" in finding["message"]


def test_a_device_side_assert_says_the_traceback_may_be_late(fixtures):
    code, report = _inspect(fixtures, "tune_cuda_device_assert", "session_logs")
    assert code == 1
    (finding,) = findings_of(report, "trial-error")
    assert "AcceleratorError: CUDA error: device-side assert triggered" in finding["message"]
    assert "CUDA_LAUNCH_BLOCKING=1" in finding["fix"] and "index out of range" in finding["fix"]
    # No cause is claimed that the text does not give: not NCCL, not memory.
    assert {f["rule"] for f in report["findings"]} == {"trial-error"}


def test_a_traceback_ray_says_is_safe_to_ignore_is_not_the_runs_failure(fixtures):
    """The same run with every log: Train V2's controller logged a GetTimeoutError traceback
    under "it's safe to ignore this error" (its autoscaling request timed out, and it went on).
    That traceback had displaced the NCCL error as the run's failure."""
    code, report = _inspect(fixtures, "train_v2_nccl_shared_gpu", "driver.log", "session_logs")
    assert code == 1
    (trial,) = report["trials"]
    assert trial["failures"] == 1
    assert trial["last_error"].startswith("DistBackendError: NCCL error")
    assert [f["rule"] for f in report["findings"]] == ["nccl-error"]
    assert "GetTimeoutError" not in str(report["findings"])
