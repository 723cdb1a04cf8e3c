"""nccl-error: NCCL failed for a reason other than a timeout."""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment, Failure
from ray_doctor.rules._base import Precedence, subject_name
from ray_doctor.rules._crash import KERNEL_FAULT
from ray_doctor.rules._signature import (
    Hit,
    SignatureRule,
    first_group,
    mentions,
    signatures,
    wording,
)

NCCL_RESULT = "NCCL result code (ncclGetErrorString) through torch c10d NCCLUtils"
NCCL = signatures(
    # First: it comes with ncclInvalidUsage, whose usual meaning (ranks out of step) is not it.
    wording(
        "duplicate GPU",
        r"Duplicate GPU detected : rank \d+ and rank \d+ both on CUDA device",
        "NCCL init (src/init.cc), shown by torch as NCCL's last error",
        "NCCL 2.x",
        "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 3b000",
    ),
    # CuPy's NCCL binding raises NcclError(status) for any result but success: ray.util.collective
    # (its NCCL groups) and Chainer-era code call NCCL through it.
    wording(
        "CuPy NcclError",
        r"\bNcclError\b",
        "CuPy's NCCL binding (cupy_backends/cuda/libs/nccl.pyx), used by ray.util.collective",
        "CuPy 7-14; Ray 1.x-2.x collective",
        "ray.exceptions.RayTaskError(NcclError): ray::Worker.compute() (pid=35381, ip=10.0.0.5)",
    ),
    wording(
        "unhandled CUDA error",
        r"ncclUnhandledCudaError|unhandled cuda error",
        NCCL_RESULT,
        "NCCL 2.x; torch 1.x-2.13",
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:121, "
        "unhandled cuda error, NCCL version 2.14.3",
    ),
    wording(
        "system error",
        r"ncclSystemError|unhandled system error",
        NCCL_RESULT,
        "NCCL 2.x; torch 1.x-2.13",
        "RuntimeError: NCCL error in: /opt/pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, "
        "unhandled system error, NCCL version 2.7.8",
    ),
    wording(
        "internal error",
        r"ncclInternalError|internal error - please report this issue to the NCCL developers",
        NCCL_RESULT,
        "NCCL 2.x; torch 1.x-2.13",
        "ncclInternalError: Internal check failed.",
    ),
    wording(
        "invalid usage",
        r"ncclInvalidUsage|NCCL error[^\n]*invalid usage",
        NCCL_RESULT,
        "NCCL 2.x; torch 1.x-2.13",
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
    ),
    wording(
        "remote error",
        r"ncclRemoteError|remote process exited or there was a network error",
        NCCL_RESULT,
        "NCCL 2.12-2.2x; torch 1.12-2.13",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process "
        "exiting prematurely.",
    ),
    wording(
        "invalid argument",
        r"ncclInvalidArgument",
        NCCL_RESULT,
        "NCCL 2.x",
        "ncclInvalidArgument: Invalid value for an argument.",
    ),
    wording(
        "NCCL error",
        # RCCL keeps NCCL's words; Ascend's torch_npu prints HCCL's.
        r"NCCL error in: ([^,\s]+)|HCCL error in: ([^,\s]+)|DIST call hccl api failed",
        "torch c10d NCCL_CHECK (ProcessGroupNCCL.cpp, NCCLUtils.hpp)",
        "torch 1.0-2.13",
        "torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, internal error",
    ),
    wording(
        "NCCL Error N (old torch)",
        r"NCCL Error \d+: (?:unhandled|internal|invalid)",
        "torch c10d NCCL_CHECK before the 'NCCL error in:' wording (torch/lib/c10d)",
        "torch 1.0-1.5",
        "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:400, "
        "NCCL Error 2: unhandled system error",
    ),
    wording(
        "NCCL communicator aborted",
        r"NCCL communicator was aborted",
        "torch c10d ProcessGroupNCCL",
        "torch 1.8-2.13",
        "RuntimeError: NCCL communicator was aborted on rank 1.",
    ),
    wording(
        "NCCL shared memory",
        r"shared memory segment /dev/shm/nccl-|NCCL WARN [^\n]*(?:posix_fallocate|No space left)",
        "NCCL shared-memory transport (src/misc/shmutils.cc)",
        "NCCL 2.x",
        "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-UmqSM9 (size 7340384)",
    ),
    # NCCLCHECK logs "file:line -> result" at each level a failed call returns through (only
    # with NCCL_DEBUG=INFO, and only for a result other than ncclSuccess).
    wording(
        "NCCL call failed (debug trace)",
        r"NCCL INFO [\w/.-]+\.(?:cc|cu|h|cpp):\d+ -> [1-7]\b",
        "NCCL's NCCLCHECK macro (src/include/checks.h)",
        "NCCL 2.x",
        "node1:16674:17023 [0] NCCL INFO graph/search.cc:733 -> 2",
    ),
    wording(
        "NCCL transport warning",
        r"NCCL WARN [^\n]*(?:[Cc]onnect|socket|recv|send|NET/|completion|Duplicate GPU|"
        r"[Bb]ootstrap|ibv_|Proxy|[Cc]uda failure|failed)",
        "NCCL debug output (NCCL_DEBUG=WARN/INFO): network, proxy and init failures",
        "NCCL 2.x",
        "misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45763> failed : "
        "Software caused connection abort",
    ),
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
    "duplicate GPU": "two ranks were given the same GPU: a fractional GPU per worker (Ray "
    "packs such workers onto one device), or every rank left on `cuda:0` instead of its "
    "local rank's device",
}
GENERIC_FIX = (
    "Re-run with `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET` to see the failing step. "
    "Check the network interface (`NCCL_SOCKET_IFNAME`), try `NCCL_IB_DISABLE=1`, give "
    "containers a large `/dev/shm`, use one torch/NCCL build on all nodes, and look for "
    "an earlier error on the other ranks."
)
# Codes whose cause the text already names: the network checks above would send the reader
# the wrong way (seen on a real H100: two Train workers at 0.5 GPU each).
FIXES = {
    "duplicate GPU": (
        "Give each rank a GPU of its own: in Ray Train ask for whole GPUs "
        "(`ScalingConfig(use_gpu=True)` without a fractional `resources_per_worker` GPU, and "
        "no more workers than GPUs); outside Ray Train call "
        "`torch.cuda.set_device(local_rank)` before `init_process_group`. Workers that must "
        "share a GPU need the gloo backend (`TorchConfig(backend='gloo')`)."
    ),
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
        Timeouts are `collective-timeout`, which leads when both match. A CUDA kernel fault in
        the same text (a device-side assert, an illegal memory access) makes every later CUDA
        call fail, NCCL's too: the NCCL error is then its consequence and this rule stays
        silent (the fault is reported with its text).
    Fix:
        Re-run with `NCCL_DEBUG=INFO` (and `NCCL_DEBUG_SUBSYS=INIT,NET`) to see which step
        fails. For system errors check interfaces (`NCCL_SOCKET_IFNAME`), InfiniBand
        (`NCCL_IB_DISABLE=1` to test), and give containers a large `/dev/shm`. Use the same
        torch/NCCL build on every node. For remote errors, find the rank that failed first.
        "Duplicate GPU detected" means two ranks share a device: give each its own GPU
        (whole GPUs per Ray Train worker, or `torch.cuda.set_device(local_rank)`), or use
        gloo for workers that must share one.
    References:
        - https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
        - https://docs.ray.io/en/latest/train/user-guides/debugging.html
    """

    specificity = Precedence.TRANSPORT
    id = "nccl-error"
    title = "NCCL error"
    severity = Severity.ERROR
    commands = ("inspect", "smoke")
    example = "fixtures/train_v2_nccl_shared_gpu"
    signatures = NCCL

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        return mentions(experiment, failure, KERNEL_FAULT)

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        who = subject_name(experiment, hit.trial)
        message = f"{who} failed in NCCL ({hit.signature.label}: {hit.evidence.excerpt})"
        advice = ADVICE.get(hit.signature.label)
        if advice:
            message += f"; this code usually means {advice}"
        last = first_group(hit, LAST_ERROR)
        if last and last.strip() not in hit.evidence.excerpt:  # said once is enough
            message += f". NCCL's last error: {last.strip()}"
        version = first_group(hit, VERSION)
        if version:
            message += f" (NCCL {version})"
        message += "."
        return message, FIXES.get(hit.signature.label, GENERIC_FIX)
