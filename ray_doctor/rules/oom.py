"""The out-of-memory family: Ray's memory monitor, the GPU, and the kernel's OOM killer.

They share one module because they must not overlap: a worker Ray's memory monitor killed also
dies by SIGKILL, so `oom-killed-by-os` stands back whenever Ray's own message is there.
"""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment, Failure
from ray_doctor.rules._base import Precedence, subject_name
from ray_doctor.rules._signature import (
    Hit,
    SignatureRule,
    first_group,
    first_match,
    hit_text,
    search,
    signatures,
)

RAY_MONITOR = signatures(
    (
        "memory monitor (Ray >= 2.56)",
        r"(\d+) worker\(s\) were killed due to the node running low on memory",
    ),
    ("memory monitor (Ray < 2.56)", r"Task was killed due to the node running low on memory"),
    ("raylet kill notice", r"Killing (\d+) worker\(s\), kill details: Memory on the node"),
    ("GCS worker exit", r"exit_type = NODE_OUT_OF_MEMORY"),
    ("raylet summary", r"(\d+) Workers \(tasks / actors\) killed due to memory pressure \(OOM\)"),
    ("task retried after OOM", r"failed due to oom\. There are"),
    ("Ray OutOfMemoryError", r"ray\.exceptions\.OutOfMemoryError"),
)
USED_NEW = re.compile(r"was ([\d.]+GB) used / ([\d.]+GB) limit")
USED_OLD = re.compile(r"was ([\d.]+GB) / ([\d.]+GB) \(")
TASK_NAME = re.compile(r"task name=([\w.<>]+)|name=([\w.<>]+), pid=")
NODE_IP = re.compile(r"Memory on the node \(IP: ([^,]+),")

CUDA = signatures(
    ("torch OutOfMemoryError", r"torch\.(?:cuda\.)?OutOfMemoryError"),
    ("CUDA out of memory", r"CUDA out of memory"),
    ("CUDA error: out of memory", r"CUDA error: out of memory"),
)
TRIED = re.compile(r"Tried to allocate ([\d.]+ [KMGT]i?B)")
GPU_INDEX = re.compile(r"GPU (\d+)")
TOTAL = re.compile(r"([\d.]+ [KMGT]i?B) total capacity|has a total capacity of ([\d.]+ [KMGT]i?B)")

OS_KILL = signatures(
    ("kernel OOM killer", r"Out of memory: Kill(?:ed)? process (\d+)"),
    (
        "kernel OOM killer",
        r"oom-kill:constraint=|Memory cgroup out of memory|oom_reaper: reaped process (\d+)",
    ),
    (
        "exit code 137",
        r"exit(?:ed)? (?:with )?(?:code|status):? ?137\b|exitcode: -9\b|exit code -9\b",
    ),
    (
        "worker died without an exception",
        r"Worker unexpectedly exits with a connection error code 2",
    ),
    (
        "worker died without an exception",
        r"Worker exits unexpectedly\. Worker exits with an exit code None",
    ),
    ("worker crashed", r"The worker died unexpectedly while executing this task"),
)
KERNEL_CONFIRMS = re.compile(
    r"Out of memory: Kill|oom-kill:|Memory cgroup out of memory|oom_reaper"
)


def _ray_monitor_in(experiment: Experiment, failure: Failure | None) -> bool:
    if failure is not None and search(RAY_MONITOR, failure):
        return True
    return any(sig.pattern.search(event.line) for event in experiment.events for sig in RAY_MONITOR)


class OomRayMemoryMonitor(SignatureRule):
    """Ray's memory monitor killed a worker because the node ran low on memory.

    Symptom:
        A trial or Train worker died with `OutOfMemoryError` from Ray, or the driver stopped
        with "Caught unexpected exception: N worker(s) were killed due to the node running low
        on memory"; in Ray 2.60 such a trial can stay RUNNING on storage with no error.txt.
    Likely cause:
        The processes on one node used more host memory than Ray's kill threshold
        (`RAY_memory_usage_threshold`, 0.95 by default): too many trials or workers per node,
        a whole dataset loaded into memory, large objects passed through the config, or memory
        that grows every iteration (tensors or lists kept alive).
    Evidence it uses:
        The memory monitor's message in error.txt, in the driver's output, in raylet.out
        ("Killing N worker(s)") and gcs_server.out (`exit_type = NODE_OUT_OF_MEMORY`), both
        wordings: "Task was killed due to the node running low on memory" (before 2.56) and
        "N worker(s) were killed due to the node running low on memory".
    Fix:
        Give each trial the memory it needs so Ray places fewer per node:
        `tune.with_resources(trainable, {"cpu": 2, "memory": 8 * 1024**3})` or
        `TuneConfig(max_concurrent_trials=...)`; for Train, fewer workers per node. Stream data
        (Ray Data, generators) instead of loading it whole, create datasets and models inside
        the training function, and free large objects (`del`, `gc.collect()`). The threshold
        can be raised with `RAY_memory_usage_threshold`, at the risk of the kernel's killer.
    References:
        - https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html
        - https://docs.ray.io/en/latest/ray-observability/user-guides/debug-apps/debug-memory.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "oom-ray-memory-monitor"
    title = "Killed by Ray's memory monitor"
    severity = Severity.ERROR
    example = "fixtures/tune_oom_memory_monitor"
    signatures = RAY_MONITOR
    victim_pid = re.compile(r"pid=(\d+), actual memory used|name=[^,]*, pid=(\d+), memory used")

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        match = first_match(hit, USED_NEW, USED_OLD)
        task = first_group(hit, TASK_NAME)
        node = first_group(hit, NODE_IP)
        who = subject_name(experiment, hit.trial)
        if hit.trial is None and hit.failure is not None:
            who = "The driver"
            detail = " stopped because Ray's memory monitor killed a worker"
        else:
            detail = " was stopped by Ray's memory monitor"
        message = f"{who}{detail}: the node ran low on host memory"
        if match:
            message += f" ({match.group(1)} used of {match.group(2)}"
            message += f" on node {node})" if node else ")"
        if task:
            message += f"; the process killed was running {task}"
        message += f". Evidence: {hit.signature.label}."
        unfinished = [t for t in experiment.trials if t.status.unfinished]
        if unfinished and hit.trial is None:
            message += (
                f" {len(unfinished)} trial(s) were left unfinished on storage because the driver "
                "stopped."
            )
        fix = (
            "Request memory per trial so Ray places fewer on a node "
            '(`tune.with_resources(trainable, {"cpu": 2, "memory": 8 * 1024**3})` or '
            "`TuneConfig(max_concurrent_trials=...)`; for Train, fewer workers per node), stream "
            "data instead of loading it whole, and free large objects between iterations. Then "
            "resume the run; `RAY_memory_usage_threshold` moves the kill threshold."
        )
        return message, fix


class OomCuda(SignatureRule):
    """The GPU ran out of memory (CUDA out of memory).

    Symptom:
        A trial or Train worker failed with `torch.OutOfMemoryError` /
        `torch.cuda.OutOfMemoryError`, "CUDA out of memory. Tried to allocate ..." or
        "CUDA error: out of memory".
    Likely cause:
        The batch, the model, or the activations kept for backward do not fit in the GPU's
        memory; or several trials share one GPU (fractional `gpu` resources); or memory is
        fragmented (much reserved but unallocated).
    Evidence it uses:
        The exception in error.txt, the driver's log or the Train worker logs; the requested
        allocation and GPU index when torch prints them.
    Fix:
        In order of cost: a smaller batch size; gradient accumulation to keep the effective
        batch; mixed precision (`torch.autocast` with bf16/fp16); activation checkpointing;
        sharding the model (FSDP, DeepSpeed ZeRO). Give each trial a whole GPU
        (`{"gpu": 1}`). When reserved memory far exceeds allocated memory, set
        `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    References:
        - https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf
        - https://docs.ray.io/en/latest/train/user-guides/fault-tolerance.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "oom-cuda"
    title = "GPU out of memory"
    severity = Severity.ERROR
    example = "fixtures/edited/oom_cuda/error.txt"
    signatures = CUDA

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        tried = first_group(hit, TRIED)
        gpu = first_group(hit, GPU_INDEX)
        total = first_group(hit, TOTAL)
        message = f"{subject_name(experiment, hit.trial)} ran out of GPU memory"
        if hit.failure and hit.failure.ranks:
            message += f" on rank {', '.join(map(str, hit.failure.ranks))}"
        details = [
            f"tried to allocate {tried}" if tried else "",
            f"GPU {gpu}" if gpu else "",
            f"{total} total" if total else "",
        ]
        if any(details):
            message += f" ({', '.join(d for d in details if d)})"
        batch = _batch_setting(hit)
        if batch:
            message += f"; the trial's config has {batch}"
        message += "."
        fix = (
            "Lower the batch size (keep the effective batch with gradient accumulation), use "
            "mixed precision (`torch.autocast(dtype=torch.bfloat16)`), activation checkpointing, "
            "or shard the model (FSDP / ZeRO). Give each trial a whole GPU. If much memory is "
            "reserved but not allocated, set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`."
        )
        return message, fix


def _batch_setting(hit: Hit) -> str | None:
    if hit.trial is None:
        return None
    for key, value in hit.trial.config.items():
        if "batch" in key.lower() and isinstance(value, (int, float)):
            return f"{key}={value}"
    return None


class OomKilledByOs(SignatureRule):
    """A worker died without a Python exception (SIGKILL, exit 137): most likely the kernel's OOM killer.

    Symptom:
        A trial or worker ended with Ray's "The actor died unexpectedly" / "Worker unexpectedly
        exits with a connection error code 2. End of file", "The worker died unexpectedly",
        exit code 137 (128 + SIGKILL), or the kernel log says "Out of memory: Killed process".
    Likely cause:
        When memory runs out faster than Ray's memory monitor samples it (or the monitor is
        off, or a container limit is lower than the node's memory), the kernel or the
        container runtime kills the biggest process with SIGKILL and no Python error is
        written. The same symptom has other causes: `ray stop --force`, a crash in native code
        (SIGSEGV), a node or pod being shut down or preempted. Only a kernel log line proves
        the OOM killer.
    Evidence it uses:
        Ray's worker-death text in error.txt or logs, exit code 137 or -9, and kernel OOM
        lines in any text given (a saved `dmesg`, `journalctl -k`). It stays silent when Ray's
        own memory-monitor message is present (that is `oom-ray-memory-monitor`).
    Fix:
        Check `dmesg -T | grep -i -E "killed process|oom"` on the node that ran the worker
        (or the pod's `OOMKilled` status). If it was the OOM killer: request memory per trial,
        fewer trials or workers per node, stream data, and keep Ray's memory monitor on so
        that it, not the kernel, picks what to kill. If not: look for a SIGSEGV in the
        worker's .err log and for node shutdowns.
    References:
        - https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html
        - https://docs.ray.io/en/latest/train/user-guides/fault-tolerance.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "oom-killed-by-os"
    title = "Worker killed without an exception (likely the OS OOM killer)"
    severity = Severity.ERROR
    example = "fixtures/tune_sigkill"
    signatures = OS_KILL

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        return _ray_monitor_in(experiment, failure)

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        who = subject_name(experiment, hit.trial)
        kernel = KERNEL_CONFIRMS.search(hit_text(hit)) or any(
            KERNEL_CONFIRMS.search(e.line) for e in experiment.events
        )
        if kernel:
            message = (
                f"{who}'s worker was killed by the kernel's OOM killer (the kernel log says so)."
            )
        else:
            message = (
                f"{who}'s worker process died without a Python exception ({hit.signature.label}). "
                "The most likely cause is the kernel's OOM killer (SIGKILL); `ray stop --force`, a "
                "crash in native code (SIGSEGV) or a node shutdown look the same. No kernel log "
                "was given to confirm it."
            )
        fix = (
            "Confirm on the node: `dmesg -T | grep -i -E 'killed process|out of memory'` (or the "
            "pod's OOMKilled status). If it was memory: request memory per trial "
            '(`tune.with_resources(trainable, {"memory": ...})`), run fewer trials or workers per '
            "node and stream data. Otherwise look for a segfault in the worker's .err log."
        )
        return message, fix
