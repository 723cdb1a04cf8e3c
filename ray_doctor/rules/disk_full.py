"""disk-full: a write failed because a disk (or the object store's spill space) was full."""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment, Failure
from ray_doctor.rules._base import Precedence, subject_name
from ray_doctor.rules._signature import Hit, SignatureRule, signatures, wording

SEMAPHORE = "SemLock("  # multiprocessing/synchronize.py, making a POSIX semaphore in /dev/shm
# Python's MemoryError as its exception line (numpy's subclass too; not torch's OutOfMemoryError).
MEMORY_ERROR = re.compile(r"\s*(?:[\w.]+\.)?MemoryError\b")
# What says the disk itself is full, beside a MemoryError.
NO_SPACE = re.compile(r"No space left|Errno 28|ENOSPC|OutOfDiskError|[Dd]isk quota|disk is full")
FULL = signatures(
    wording(
        "ENOSPC",
        # Not a disk: NCCL's /dev/shm segments (nccl-error's), and torch's shared-memory
        # files ("unable to write to file </torch_...>", MapAllocator), which fill /dev/shm
        # (64 MB in a default container) when DataLoader workers hand tensors over.
        r"^(?!.*(?:NCCL|</torch_))(?:.*)"
        # Not the inotify watch limit either: watchdog raises ENOSPC for it with its own words.
        r"(?:No space left on device|ENOSPC|\[Errno 28\](?! inotify watch limit)|errno:? ?28\b)",
        "the OS (ENOSPC) through Python OSError, torch, pyarrow, Ray (NCCL's /dev/shm is "
        "nccl-error's; torch's shared-memory files are /dev/shm, not a disk)",
        "any",
        "OSError: [Errno 28] No space left on device",
    ),
    wording(
        "torch save on a full disk",
        # (the position check's own words: a paste can mangle "[enforce fail at FILE:LINE]")
        r"PytorchStreamWriter failed writing|\. unexpected pos \d+ vs \d+",
        "torch zip writer (caffe2/serialize/inline_container.cc)",
        "torch 1.6-2.13",
        "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1152 vs 1040",
    ),
    wording(
        "Ray OutOfDiskError",
        r"OutOfDiskError|[Ll]ocal disk is full",
        "Ray object store spilling (python/ray/exceptions.py OutOfDiskError)",
        "Ray 1.11-2.60",
        "ray.exceptions.OutOfDiskError: Local disk is full. The object cannot be created because "
        "the local object store is full and the local disk's utilization is over capacity",
    ),
    wording(
        "Ray disk usage monitor",
        r"is over \d+% full, available space: \d+",
        "Ray raylet file system monitor (src/ray/common/file_system_monitor.cc)",
        "Ray 1.11-2.60",
        "(raylet) file_system_monitor.cc:111: /tmp/ray/session_latest is over 95% full, "
        "available space: 1234; capacity: 100000. Object creation will fail if spilling is "
        "required.",
    ),
    wording(
        "Ray object store out of disk",
        r"Out-of-disk: Failed to create object|Plasma fallback allocator failed, likely out of "
        r"disk space|has no capacity, object creation will fail if spilling is required",
        "Ray's raylet: the plasma store's create queue and fallback allocator (src/ray/"
        "object_manager/plasma/create_request_queue.cc, object_lifecycle_manager.cc) and the "
        "file system monitor (src/ray/common/file_system_monitor.cc)",
        "Ray 1.13-2.60",
        "Plasma fallback allocator failed, likely out of disk space.",
    ),
    wording(
        "Kubernetes eviction: disk",
        r"The node was low on resource: ephemeral-storage|"
        r"ephemeral local storage usage exceeds the total limit",
        "Kubernetes kubelet eviction manager (pkg/kubelet/eviction)",
        "Kubernetes 1.x",
        "Status: Failed  Reason: Evicted  Message: The node was low on resource: "
        "ephemeral-storage.",
    ),
    # TensorFlow's file systems map ENOSPC and EDQUOT (and EMFILE, ENOMEM: rare on a write) to RESOURCE_EXHAUSTED
    # (tensorflow/core/platform/errors: ErrnoToCode); its checkpoint writer wraps that status.
    wording(
        "TensorFlow checkpoint write: resource exhausted",
        r"Error writing \(tmp\) checkpoint file: .*Resource exhausted: ",
        "TensorFlow tensor_slice_writer.cc (a file write whose errno TF maps to "
        "RESOURCE_EXHAUSTED: ENOSPC, EDQUOT)",
        "TensorFlow 1.x-2.x",
        "InternalError: Error writing (tmp) checkpoint file: /ckpt/model.ckpt-6.tempstate97: "
        "Resource exhausted: /ckpt/model.ckpt-6.tempstate97; No space left on device",
    ),
    wording(
        "disk quota",
        # TensorFlow's file writers lower-case the strerror ("disk quota exceeded [Op:SaveV2]").
        r"[Dd]isk quota exceeded|EDQUOT|\[Errno 122\]",
        "the OS (EDQUOT) through Python OSError",
        "any",
        "OSError: [Errno 122] Disk quota exceeded",
    ),
)
SHOWN = 3


class DiskFull(SignatureRule):
    """A write failed because the disk was full (checkpoints, results, spilled objects).

    Symptom:
        "OSError: [Errno 28] No space left on device" (ENOSPC), "Disk quota exceeded", or
        Ray's `OutOfDiskError` / "Local disk is full" while a trial writes a checkpoint or its
        results, or while Ray spills objects.
    Likely cause:
        Checkpoints pile up (every one is kept unless `CheckpointConfig(num_to_keep=...)` says
        otherwise, and large models make each one big), logs or spilled objects fill
        `/tmp/ray`, or the storage volume is small.
    Evidence it uses:
        The error text, and the trials that keep the most checkpoint dirs on storage. Not
        /dev/shm, which is memory: NCCL's segments, torch's shared-memory files
        ("</torch_...>") and multiprocessing's semaphores (`SemLock`) failing with ENOSPC are
        a small shared-memory mount (`docker run --shm-size`), reported with their text.
    Fix:
        Keep fewer checkpoints: `CheckpointConfig(num_to_keep=2)` (with
        `checkpoint_score_attribute` to keep the best). Save only what a restore needs (model
        and optimizer state; save on rank 0 only in Train). Put `storage_path` on a bigger
        volume or object storage, move Ray's temp dir (`ray start --temp-dir`) off a small
        root disk, and clean old sessions in `/tmp/ray`.
    References:
        - https://docs.ray.io/en/latest/tune/api/doc/ray.tune.CheckpointConfig.html
        - https://docs.ray.io/en/latest/ray-core/objects/object-spilling.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "disk-full"
    title = "Disk full"
    severity = Severity.ERROR
    example = "fixtures/tune_disk_full"
    signatures = FULL

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        # A POSIX semaphore (multiprocessing's SemLock, DataLoader workers' queues) that
        # cannot be made: they live in /dev/shm, 64 MB in a default container, not on a disk
        # (Megatron-LM #878). Read in the failure itself: another trial's text says nothing.
        if failure is None:
            return False
        lines = [line for _, line in failure.lines()]
        if any(SEMAPHORE in line for line in lines):
            return True
        # torch's zip writer left short ("unexpected pos") because serialising raised
        # MemoryError first (Dreambooth-Stable-Diffusion #45): the host's memory, not the disk,
        # unless the same failure also says the disk is full.
        return any(MEMORY_ERROR.match(line) for line in lines) and not any(
            NO_SPACE.search(line) for line in lines
        )

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        message = (
            f"{subject_name(experiment, hit.trial)} could not write: the disk is full "
            f"({hit.evidence.excerpt})."
        )
        counts = sorted(
            ((len([c for c in t.checkpoints if c.exists]), t.trial_id) for t in experiment.trials),
            reverse=True,
        )
        total = sum(n for n, _ in counts)
        if total:
            top = ", ".join(f"{tid} ({n})" for n, tid in counts[:SHOWN] if n)
            message += f" Storage holds {total} checkpoint dirs; most in: {top}."
        fix = (
            "Keep fewer checkpoints (`CheckpointConfig(num_to_keep=2, "
            "checkpoint_score_attribute=...)`), save only model and optimizer state (rank 0 only "
            "in Train), and put `storage_path` and Ray's temp dir on volumes with room."
        )
        return message, fix
