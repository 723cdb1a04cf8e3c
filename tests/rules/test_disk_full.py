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
