"""memory-headroom-low (smoke): a worker cannot get the memory a trial would need."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import SmokeRule


class MemoryHeadroomLow(SmokeRule):
    """Inside a real Tune trial, allocating a fraction of the free device memory failed, or the
    node is already close to the line where Ray's memory monitor kills workers.

    Symptom:
        On a GPU: allocating `--memory-fraction` (default 0.5) of the memory
        `torch.cuda.mem_get_info` reports free raises `CUDA out of memory`, or less than half
        of the device is free before the trial starts. On the CPU: the node's used memory is
        within 10 % of total of Ray's memory-usage threshold (0.95 unless
        `RAY_memory_usage_threshold` says otherwise), or a touched allocation fails.
    Likely cause:
        Another process holds the device (a stale training process, a notebook, another
        job's worker on the same GPU), fragmentation in a long-lived process, or a node whose
        host memory is already used by other work, so the next trial is the one Ray's memory
        monitor or the kernel OOM killer picks.
    Evidence it uses:
        Free and total memory per device as the trial saw them, the amount asked for, and the
        allocation's error text.
    Fix:
        Find what holds the device (`nvidia-smi` lists the processes) and stop it; give each
        trial a whole GPU; for host memory, run fewer trials per node (request more CPUs or
        `memory` per trial) or stop what else runs there. If the original failure was an OOM,
        also see `oom-cuda` / `oom-ray-memory-monitor`.
    References:
        - https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html
        - https://pytorch.org/docs/stable/notes/cuda.html#memory-management
    """

    id = "memory-headroom-low"
    title = "Not enough free memory for a trial"
    severity = Severity.ERROR
    example_note = (
        "filling a node's memory is not something a test machine should do; "
        "tests/rules/test_memory_headroom_low.py runs the real probe with "
        "`RAY_memory_usage_threshold` set below what the machine already uses"
    )
