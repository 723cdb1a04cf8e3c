"""nccl-error: NCCL failed for a reason other than a timeout."""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment
from ray_doctor.rules._base import Precedence, subject_name
from ray_doctor.rules._signature import Hit, SignatureRule, first_group, signatures

NCCL = signatures(
    ("unhandled CUDA error", r"ncclUnhandledCudaError"),
    ("system error", r"ncclSystemError"),
    ("internal error", r"ncclInternalError"),
    ("invalid usage", r"ncclInvalidUsage"),
    ("remote error", r"ncclRemoteError"),
    ("invalid argument", r"ncclInvalidArgument"),
    ("NCCL error", r"NCCL error in: ([^,\s]+)"),
    ("NCCL communicator aborted", r"NCCL communicator was aborted"),
)
VERSION = re.compile(r"NCCL version ([\d.]+\+?\w*)")
LAST_ERROR = re.compile(r"Last error:\s*\n?\s*(.+)")

ADVICE = {
    "unhandled CUDA error": "a CUDA call inside NCCL failed: often a GPU already out of memory or "
    "in a bad state (check for an earlier CUDA error or an Xid in `dmesg`)",
    "system error": "a system call failed: networking (interfaces, firewall, InfiniBand) or "
    "shared memory (`/dev/shm` too small in containers)",
    "internal error": "NCCL hit an internal problem, often mismatched NCCL versions across nodes",
    "invalid usage": "the ranks called NCCL inconsistently (different tensor sizes or order)",
    "remote error": "another rank failed or disconnected; its own error is the cause",
}


class NcclError(SignatureRule):
    """An NCCL call failed (not a timeout): ncclUnhandledCudaError, ncclSystemError, …

    Symptom:
        A distributed worker fails with "NCCL error in: …", `ncclUnhandledCudaError`,
        `ncclSystemError`, `ncclInternalError`, `ncclInvalidUsage` or `ncclRemoteError`,
        often as `torch.distributed.DistBackendError`.
    Likely cause:
        Depends on the code: a CUDA failure underneath (a GPU out of memory or in a bad
        state), the network or shared memory (`/dev/shm` too small in a container),
        NCCL versions that differ between nodes, ranks calling collectives inconsistently, or
        another rank that died first.
    Evidence it uses:
        The NCCL error text and its "Last error" line, in error.txt or the worker logs.
        Timeouts are `collective-timeout`, which leads when both match.
    Fix:
        Re-run with `NCCL_DEBUG=INFO` (and `NCCL_DEBUG_SUBSYS=INIT,NET`) to see which step
        fails. For system errors check interfaces (`NCCL_SOCKET_IFNAME`), InfiniBand
        (`NCCL_IB_DISABLE=1` to test), and give containers a large `/dev/shm`. Use the same
        torch/NCCL build on every node. For remote errors, find the rank that failed first.
    References:
        - https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
        - https://docs.ray.io/en/latest/train/user-guides/debugging.html
    """

    specificity = Precedence.TRANSPORT
    id = "nccl-error"
    title = "NCCL error"
    severity = Severity.ERROR
    commands = ("inspect", "smoke")
    example = "fixtures/edited/nccl_error/error.txt"
    signatures = NCCL

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        who = subject_name(experiment, hit.trial)
        message = f"{who} failed in NCCL ({hit.signature.label}: {hit.evidence.excerpt})"
        advice = ADVICE.get(hit.signature.label)
        if advice:
            message += f"; this code usually means {advice}"
        last = first_group(hit, LAST_ERROR)
        if last:
            message += f". NCCL's last error: {last.strip()}"
        version = first_group(hit, VERSION)
        if version:
            message += f" (NCCL {version})"
        message += "."
        fix = (
            "Re-run with `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET` to see the failing step. "
            "Check the network interface (`NCCL_SOCKET_IFNAME`), try `NCCL_IB_DISABLE=1`, give "
            "containers a large `/dev/shm`, use one torch/NCCL build on all nodes, and look for "
            "an earlier error on the other ranks."
        )
        return message, fix
