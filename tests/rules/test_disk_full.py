"""disk-full: ENOSPC while writing a checkpoint (real kernel error in a Ray 2.60 trial)."""

from conftest import experiment_dir, findings_of, inspect_json


def test_enospc(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_disk_full")))
    assert code == 1
    (finding,) = findings_of(report, "disk-full")
    assert "[Errno 28] No space left on device" in finding["message"]
    assert "checkpoint dirs" in finding["message"]
    assert "num_to_keep" in finding["fix"]


def test_ray_out_of_disk_wording():
    text = "ray.exceptions.OutOfDiskError: Local disk is full. The object cannot be created because the local object store is full and the local disk's utilization is over capacity (95% by default).\n"
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "disk-full")


def test_near_miss_errno_2():
    text = "FileNotFoundError: [Errno 2] No such file or directory: '/data/shard-28.parquet'\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "disk-full")


def test_near_miss_shared_memory_of_dataloader_workers():
    """torch's shared-memory files ("unable to write to file </torch_...>") live in /dev/shm,
    64 MB in a default container: a bigger --shm-size fixes it, not a cleaner disk
    (hopsworks #1557, as posted)."""
    text = (
        "RuntimeError: DataLoader worker (pid 729) is killed by signal: Bus error. It is "
        "possible that dataloader's workers are out of shared memory. Please try to raise your "
        "shared memory limit.\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/hops/anaconda/envs/hopsworks_environment/lib/python3.10/site-packages/'
        'torch/storage.py", line 526, in _share_fd_cpu_\n'
        "    return super()._share_fd_cpu_(*args, **kwargs)\n"
        "RuntimeError: unable to write to file </torch_739_144252761_4>: No space left on "
        "device (28)\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "disk-full")
    assert report["findings"][0]["rule"] == "trial-error", "reported with its text"


def test_near_miss_a_semaphore_in_shared_memory():
    """multiprocessing's SemLock lives in /dev/shm: ENOSPC there is a small shared-memory
    mount, not a disk (Megatron-LM #878, as posted)."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__\n'
        "    sl = self._semlock = _multiprocessing.SemLock(\n"
        "OSError: [Errno 28] No space left on device\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "disk-full")


def test_a_log_whose_trials_all_completed_gets_a_warning_not_an_error(fixtures):
    # Ray's disk monitor warns at 95 %; Tune's own lines then say every trial completed.
    completed = [
        line
        for line in (fixtures / "tune_healthy" / "driver.log").read_text().splitlines()
        if " completed after " in line
    ]
    text = "\n".join(
        [
            "(raylet) file_system_monitor.cc:111: /tmp/ray/session_latest is over 95% full, "
            "available space: 1234; capacity: 100000. Object creation will fail if spilling is "
            "required.",
            *completed,
        ]
    )
    code, report = inspect_json("-", stdin=text + "\n")
    (finding,) = findings_of(report, "disk-full")
    assert finding["severity"] == "warning"
    assert "Every trial still finished" in finding["message"]
    assert code == 0
