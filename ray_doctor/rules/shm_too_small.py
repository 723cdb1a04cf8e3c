"""shm-too-small: shared memory (/dev/shm) too small for what the run put in it."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Experiment, Failure, LogEvent
from ray_doctor.rules._base import Precedence, stop_subject, subject_name
from ray_doctor.rules._events import matching_events
from ray_doctor.rules._signature import (
    Hit,
    Signature,
    SignatureRule,
    search,
    signatures,
    wording,
)

# Ray refusing, at start-up, an object store bigger than the mount: nothing ran yet, and a
# smaller store is a fix too.
OBJECT_STORE = wording(
    "Ray object store larger than /dev/shm",
    r"object store size (?:\([\d.]+ ?GB\) )?exceeds (?:/dev/shm size|the capacity of /dev/shm)",
    "Ray's start-up, sizing the object store (python/ray/_private/services.py, "
    "determine_plasma_store_config)",
    "Ray 1.0-2.60",
    "ValueError: The configured object store size (10.24 GB) exceeds /dev/shm size (8.0 GB). "
    "This will harm performance. Consider deleting files in /dev/shm or increasing its size "
    "with --shm-size in Docker. To ignore this warning, set "
    "RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE=1.",
)

FULL = signatures(
    wording(
        "DataLoader worker: bus error",
        r"Unexpected bus error encountered in worker",
        "torch DataLoader's SIGBUS handler in each worker (torch/csrc/DataLoader.cpp)",
        "torch 0.4-2.13",
        "ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm).",
    ),
    wording(
        "Paddle DataLoader worker: bus error",
        r"Unexpected BUS error encountered in DataLoader worker",
        "PaddlePaddle's DataLoader SIGBUS handler (paddle/fluid/imperative/data_loader.cc)",
        "Paddle 2.x",
        "ERROR: Unexpected BUS error encountered in DataLoader worker. This might be caused by "
        "insufficient shared memory (shm), please check whether use_shared_memory is set and "
        "storage space in /dev/shm is enough",
    ),
    wording(
        "DataLoader worker killed by SIGBUS",
        # strsignal(SIGBUS) is "Bus error"; a terminal may wrap the line after "Bus" (and
        # undoing the wrap joins "Buserror"). The hint torch adds for SIGBUS alone is enough
        # when a paste starts after the worker's pid.
        r"DataLoader worker \(pids?\(?s?\)? ?[\d, ]+\) is killed by signal: Bus(?: ?error|$)|"
        r"dataloader's workers are out of shared memory",
        "torch DataLoader's worker watchdog (_error_if_any_worker_fails, "
        "torch/csrc/DataLoader.cpp), which adds 'It is possible that dataloader's workers are "
        "out of shared memory' for SIGBUS",
        "torch 0.4-2.13",
        "RuntimeError: DataLoader worker (pid 729) is killed by signal: Bus error. It is "
        "possible that dataloader's workers are out of shared memory. Please try to raise your "
        "shared memory limit.",
    ),
    wording(
        "torch shared-memory allocation",
        r"unable to allocate shared memory\(shm\) for file",
        "torch's MapAllocator, posix_fallocate of a shared-memory file (aten/src/ATen/"
        "MapAllocator.cpp)",
        "torch 1.13-2.13",
        "RuntimeError: unable to allocate shared memory(shm) for file </torch_20272_2808514228_0>: "
        "No space left on device (28)",
    ),
    wording(
        "torch shared-memory write",
        # The file names torch gives its shared-memory files: `/torch_<pid>_<random>_<n>`.
        r"unable to write to file </torch_",
        "torch's MapAllocator, ftruncate / write of a shared-memory file (aten/src/ATen/"
        "MapAllocator.cpp, TH/THAllocator.c before torch 1.0)",
        "torch 0.4-2.13",
        "RuntimeError: unable to write to file </torch_739_144252761_4>: No space left on "
        "device (28)",
    ),
    wording(
        "UCX shared-memory transport",
        r"mm_iface failed to allocate receive FIFO",
        "UCX's shared-memory transport (src/uct/sm/mm/base/mm_iface.c), under MPI, NCCL's "
        "UCX plugin, Ray's collective libraries",
        "UCX 1.x",
        "mm_iface failed to allocate receive FIFO",
    ),
    OBJECT_STORE,
)
# multiprocessing's named semaphores (SemLock: the queues and locks of DataLoader workers,
# multiprocessing pools) are files in /dev/shm on Linux, so ENOSPC while one is made is the
# shared-memory mount, not a disk. Matched only in a failure whose frames make a SemLock.
SEMAPHORE = "SemLock("
SEMAPHORE_FULL = signatures(
    wording(
        "multiprocessing semaphore: no space",
        r"\[Errno 28\] No space left on device",
        "CPython's _multiprocessing.SemLock (sem_open of a file in /dev/shm), raised through "
        "multiprocessing/synchronize.py",
        "Python 3.x",
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__\n'
        "    sl = self._semlock = _multiprocessing.SemLock(\n"
        "OSError: [Errno 28] No space left on device",
    ),
)
# Ray's own start-up line when /dev/shm cannot hold its object store (it moves the store to
# disk and goes on): the measure of the mount when a failure above says it ran out, and on its
# own, when nothing else was found, a warning (the run goes on, its objects on disk).
RAY_SHM_WARNING = re.compile(r"/dev/shm has only (\d+) bytes available")


class ShmTooSmall(SignatureRule):
    """Shared memory (`/dev/shm`) was too small for what the run put in it.

    Symptom:
        torch DataLoader workers die with "Unexpected bus error encountered in worker. This
        might be caused by insufficient shared memory (shm)", "DataLoader worker ... is killed
        by signal: Bus error", or fail with "unable to allocate shared memory(shm) for file
        </torch_...>" / "unable to write to file </torch_...>"; a multiprocessing semaphore
        cannot be made (`SemLock`, "[Errno 28] No space left on device"); or `ray.init` /
        `ray start` refuses an object store larger than `/dev/shm`.
    Likely cause:
        The run is in a container whose `/dev/shm` is small (64 MB by default in Docker and
        in a Kubernetes pod without a memory-backed volume there). DataLoader workers hand
        every batch to the trainer through shared memory, and Ray puts its object store there.
    Evidence it uses:
        The error text, and Ray's start-up warning "The object store is using /tmp instead of
        /dev/shm because /dev/shm has only N bytes available" for the size of the mount. That
        warning alone, when nothing failed and no other cause was found, is a warning-level
        finding: Ray goes on with its object store on disk, slower.
        Not NCCL's own `/dev/shm` segments (nccl-error's, whose fix says the same), and not
        `torch.multiprocessing`'s "Too many open files", which is a limit on descriptors.
    Fix:
        Give the container more shared memory: `docker run --shm-size=8g` (or `--ipc=host`),
        in Kubernetes an `emptyDir: {medium: Memory, sizeLimit: 8Gi}` volume mounted at
        `/dev/shm` (KubeRay's examples do), in a Ray cluster config `run_options:
        ["--shm-size=8g"]`. Until then, fewer DataLoader workers or smaller batches
        (`num_workers`, `prefetch_factor`) need less of it, and a smaller
        `object_store_memory` fits the object store in it.
    References:
        - https://docs.ray.io/en/latest/cluster/vms/references/ray-cluster-configuration.html
        - https://pytorch.org/docs/stable/data.html#multi-process-data-loading
        - https://docs.docker.com/reference/cli/docker/container/run/#ipc
    """

    specificity = Precedence.ENVIRONMENT
    id = "shm-too-small"
    title = "Shared memory too small"
    severity = Severity.ERROR
    example = "fixtures/tune_shm_too_small"
    example_args = ("--logs", "fixtures/tune_shm_too_small/driver.log")
    signatures = FULL
    needs_findings = True  # Ray's warning alone speaks only when nothing else was found

    @classmethod
    def wordings(cls) -> tuple[Signature, ...]:
        return FULL + SEMAPHORE_FULL

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        warning = _ray_shm_warning(experiment)
        for finding in super().check(experiment):
            if warning is not None and warning[0].source not in finding.evidence:
                finding.evidence.append(warning[0].source)  # the mount's size, in Ray's words
            yield finding

    def check_findings(self, experiment: Experiment, findings: list[Finding]) -> Iterator[Finding]:
        """Ray's start-up warning with nothing else found: the object store went to disk. Not
        when anything failed or any cause was found: then the warning is a bystander (a run
        that failed of something else in the same small container)."""
        if findings or experiment.failures or any(t.failures for t in experiment.trials):
            return
        warning = _ray_shm_warning(experiment)
        if warning is None:
            return
        event, size = warning
        megabytes = int(size.group(1)) / 2**20
        yield self.finding(
            experiment,
            f"Ray put its object store on disk (/tmp), not in shared memory: /dev/shm holds only "
            f"{megabytes:.0f} MB. Objects passed between tasks and workers are read and written "
            "through the disk, which slows the run; a store that outgrows the disk fails.",
            "Give the container more shared memory: `docker run --shm-size=...` (at least the "
            "object store's size, or `--ipc=host`); in Kubernetes mount an `emptyDir: {medium: "
            "Memory}` volume at /dev/shm; in a Ray cluster config add `--shm-size` to "
            "`docker.run_options`. Or ask for an object store that fits "
            "(`ray.init(object_store_memory=...)`).",
            [event.source],
            subject=stop_subject(experiment),
            severity=Severity.WARNING,
        )

    def search_failure(self, failure: Failure) -> Hit | None:
        hit = search(FULL, failure)
        if hit is None and any(SEMAPHORE in line for _, line in failure.lines()):
            hit = search(SEMAPHORE_FULL, failure)
        return hit

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        subject = subject_name(experiment, hit.trial)
        if hit.signature is OBJECT_STORE:
            message = (
                f"{subject} could not start Ray: its object store does not fit in shared "
                f"memory (/dev/shm): {hit.evidence.excerpt}."
            )
            fix = (
                "Give the container more shared memory (`docker run --shm-size=...` at least "
                "the object store's size; in Kubernetes an `emptyDir: {medium: Memory}` volume "
                "at /dev/shm), or ask for a smaller object store "
                "(`ray.init(object_store_memory=...)`, `ray start --object-store-memory`)."
            )
            return message, fix
        message = f"{subject} ran out of shared memory (/dev/shm): {hit.evidence.excerpt}."
        warning = _ray_shm_warning(experiment)
        if warning is not None:
            size = int(warning[1].group(1))
            message += (
                f" Ray found /dev/shm holding only {size / 2**20:.0f} MB at start-up and put "
                "its object store on disk instead."
            )
        fix = (
            "Give the container more shared memory: `docker run --shm-size=8g` (or "
            "`--ipc=host`); in Kubernetes mount an `emptyDir: {medium: Memory}` volume at "
            "/dev/shm; in a Ray cluster config add `--shm-size` to `docker.run_options`. "
            "Meanwhile fewer DataLoader workers or smaller batches need less of it."
        )
        return message, fix


def _ray_shm_warning(experiment: Experiment) -> tuple[LogEvent, re.Match[str]] | None:
    """Ray's start-up warning that gives the size of /dev/shm, when a log holds it."""
    return next(matching_events(RAY_SHM_WARNING, experiment.events), None)
