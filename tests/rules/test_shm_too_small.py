"""shm-too-small: /dev/shm too small for DataLoader workers' batches or Ray's object store (real
torch error in a Ray 2.60 trial run with a 64 MB /dev/shm, and texts as users posted them)."""

from conftest import experiment_dir, findings_of, inspect_json

RAY_SHM_WARNING = "because /dev/shm has only 67108864 bytes available"


def test_dataloader_workers_out_of_shared_memory_in_a_real_trial(fixtures):
    fixture = fixtures / "tune_shm_too_small"
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_shm_too_small")))
    assert code == 1
    (finding,) = findings_of(report, "shm-too-small")
    assert report["findings"][0] is finding, "the cause leads, the error folds under it"
    assert "unable to allocate shared memory(shm) for file </torch_" in finding["message"]
    assert finding["evidence"][0]["path"].endswith("error.txt")
    assert "--shm-size" in finding["fix"]
    assert "Ray found" not in finding["message"], "no log given: the mount's size is unknown"

    # With the driver's log, Ray's own start-up warning gives the mount's size.
    _, report = inspect_json(
        str(experiment_dir(fixtures, "tune_shm_too_small")), "--logs", str(fixture / "driver.log")
    )
    (finding,) = findings_of(report, "shm-too-small")
    assert "only 64 MB" in finding["message"]
    assert any(RAY_SHM_WARNING in e["excerpt"] for e in finding["evidence"])


def test_a_dataloader_bus_error_as_posted():
    """PyTorch #16979: DataLoader workers in a Kubernetes pod die with SIGBUS."""
    text = (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm).\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.6/site-packages/torch/utils/data/dataloader.py", '
        "line 511, in _try_get_batch\n"
        "    data = self.data_queue.get(timeout=timeout)\n"
        "RuntimeError: DataLoader worker (pid 125) is killed by signal: Bus error.\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert report["findings"][0]["rule"] == "shm-too-small"
    assert not findings_of(report, "oom-killed-by-os"), "a bus error is not a kill for memory"


def test_a_wrapped_bus_error_line():
    """fastai docker-containers #21: the terminal cut the line after "Bus"."""
    text = (
        "RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus\n"
        "error. It is possible that dataloader's workers are out of shared\n"
        "memory. Please try to raise your shared memory limit.\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "shm-too-small")


def test_ray_refuses_an_object_store_larger_than_dev_shm():
    """KubeRay #201: the pod's /dev/shm was sized from its memory request."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/ray/anaconda3/lib/python3.7/site-packages/ray/_private/services.py", '
        "line 1903, in determine_plasma_store_config\n"
        '    "The configured object store size ({} GB) exceeds "\n'
        "ValueError: The configured object store size (10.24 GB) exceeds /dev/shm size (8.0 GB). "
        "This will harm performance. Consider deleting files in /dev/shm or increasing its size "
        "with --shm-size in Docker. To ignore this warning, set "
        "RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE=1.\n"
    )
    _, report = inspect_json("-", stdin=text)
    finding = report["findings"][0]
    assert finding["rule"] == "shm-too-small"
    assert "could not start Ray" in finding["message"]
    assert "object_store_memory" in finding["fix"]
    assert not findings_of(report, "cluster-unreachable")


def test_a_semaphore_that_cannot_be_made_but_not_a_bare_enospc():
    """Megatron-LM #878: multiprocessing's SemLock is a file in /dev/shm."""
    enospc = "OSError: [Errno 28] No space left on device\n"
    semaphore = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__\n'
        "    sl = self._semlock = _multiprocessing.SemLock(\n" + enospc
    )
    _, report = inspect_json("-", stdin=semaphore)
    assert report["findings"][0]["rule"] == "shm-too-small"
    assert not findings_of(report, "disk-full")
    # The same errno written anywhere else is a disk.
    _, report = inspect_json("-", stdin=enospc)
    assert report["findings"][0]["rule"] == "disk-full"
    assert not findings_of(report, "shm-too-small")


def _ray_shm_warning(fixtures) -> str:
    return next(
        line
        for line in (fixtures / "tune_shm_too_small" / "driver.log").read_text().splitlines()
        if RAY_SHM_WARNING in line
    )


def test_near_miss_ray_moving_its_object_store_beside_another_failure(fixtures):
    """Ray's start-up warning says /dev/shm is small and goes on: beside a failure of another
    kind it is a bystander in the same container, and the failure leads."""
    crash = "ValueError: learning rate must be positive\n"
    _, report = inspect_json("-", stdin=_ray_shm_warning(fixtures) + "\n" + crash)
    assert not findings_of(report, "shm-too-small")
    assert report["findings"][0]["rule"] == "trial-error"


def test_ray_moving_its_object_store_alone_is_a_warning(fixtures):
    """The same warning with nothing failed and nothing else found (llmaz #238, open-instruct
    #1067: a pod or container left at 64 MB): the object store is on disk, and the run is
    slower for it. A warning, not an error: `--fail-on error` stays 0."""
    code, report = inspect_json("-", stdin=_ray_shm_warning(fixtures) + "\n")
    assert code == 0
    (finding,) = findings_of(report, "shm-too-small")
    assert finding["severity"] == "warning"
    assert "only 64 MB" in finding["message"] and "--shm-size" in finding["fix"]


def test_near_miss_other_shared_memory_errors():
    # A DataLoader worker the OOM killer took is host memory (oom-killed-by-os's).
    killed = "RuntimeError: DataLoader worker (pid 8544) is killed by signal: Killed.\n"
    _, report = inspect_json("-", stdin=killed)
    assert not findings_of(report, "shm-too-small")
    # torch's file_descriptor sharing out of descriptors is a ulimit, not the mount's size.
    descriptors = (
        "RuntimeError: unable to open shared memory object </torch_4152_3362563034_7> in "
        "read-write mode: Too many open files (24)\n"
    )
    _, report = inspect_json("-", stdin=descriptors)
    assert not findings_of(report, "shm-too-small")
    # NCCL's own segments stay nccl-error's (its fix names /dev/shm too).
    nccl = (
        "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-UmqSM9 "
        "(size 7340384)\n"
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
    )
    _, report = inspect_json("-", stdin=nccl)
    assert report["findings"][0]["rule"] == "nccl-error"
    assert not findings_of(report, "shm-too-small")


def test_paddle_and_a_paste_that_starts_after_the_pid():
    # PaddleSpeech #790: Paddle's own DataLoader SIGBUS handler.
    paddle = (
        "ERROR: Unexpected BUS error encountered in DataLoader worker. This might be caused by "
        "insufficient shared memory (shm), please check whether use_shared_memory is set and "
        "storage space in /dev/shm is enough\n"
    )
    _, report = inspect_json("-", stdin=paddle)
    assert report["findings"][0]["rule"] == "shm-too-small"
    # Kubeflow Pipelines #6880: only the hint torch adds for SIGBUS made it into the paste.
    tail = (
        "`Bus error. It is possible that dataloader's workers are out of shared memory. Please "
        "try to raise your shared memory limit.\n"
    )
    _, report = inspect_json("-", stdin=tail)
    assert report["findings"][0]["rule"] == "shm-too-small"
