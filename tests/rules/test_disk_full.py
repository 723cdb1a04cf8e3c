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
    assert report["findings"][0]["rule"] == "shm-too-small"


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
    assert report["findings"][0]["rule"] == "shm-too-small"


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


SHORT_WRITE = (
    "RuntimeError: [enforce fail at ..\\caffe2\\serialize\\inline_container.cc:300] . "
    "unexpected pos 6057217600 vs 6057217496\n"
)


def test_a_short_torch_save_whose_marker_a_paste_mangled():
    """StyleTTS-WebUI #18: '[' lost and ':' turned to '_' in the paste; the drive was full."""
    text = "enforce fail at inline_container.cc_595] . unexpected pos 1457862912 vs 1457862800\n"
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "disk-full")


def test_near_miss_a_torch_save_cut_short_by_memory_error():
    """Dreambooth-Stable-Diffusion #45: serialising a 6 GB checkpoint raised MemoryError, and
    the zip writer's end-of-file check then saw the short write. Not the disk."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "torch\\serialization.py", line 499, in _save\n'
        "    zip_file.write_record(name, storage.data_ptr(), num_bytes)\n"
        "MemoryError\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "torch\\serialization.py", line 259, in __exit__\n'
        "    self.file_like.write_end_of_file()\n" + SHORT_WRITE
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "disk-full")
    # With the disk's own word beside it, the disk is still named.
    _, report = inspect_json("-", stdin=text + "OSError: [Errno 28] No space left on device\n")
    assert findings_of(report, "disk-full")


def test_near_miss_the_inotify_watch_limit_is_enospc_too():
    """watchdog's inotify observer raises ENOSPC with its own words when the kernel's
    fs.inotify.max_user_watches is reached: no disk is full (swanlab #579, as posted)."""
    text = "OSError: [Errno 28] inotify watch limit reached\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "disk-full")
