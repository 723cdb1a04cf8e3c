"""A worker process that died without raising: what a crash prints, whose it was, and an exit.

Ray reports a worker that died of a signal the same way as one the kernel killed ("The actor
died unexpectedly", "Worker unexpectedly exits with a connection error code 2"). What tells
them apart is the crash's own output, which the dying process writes to its log before Ray
notices, or Ray's own exit code for a process that exited by itself: `oom-killed-by-os` stands
back when either is there, and `trial-error` quotes it.
"""

from __future__ import annotations

import re

from ray_doctor._literals import may_match
from ray_doctor.model import Experiment, Failure, Layout, LogEvent, Trial
from ray_doctor.rules._signature import search_events, signatures, wording

# What a crash itself prints (not Ray's own list of possible causes, which names SIGSEGV):
# absl's / glog's handlers in Ray and torch C++, CPython's faulthandler, the shell, CUDA,
# torchelastic's report of the signal.
CRASH = re.compile(
    r"\*\*\* SIG(?:SEGV|ABRT|BUS|ILL|FPE) received|Fatal Python error: |Segmentation fault|"
    r"Bus error \(core dumped\)|Illegal instruction|Aborted \(core dumped\)|"
    r"illegal memory access was encountered|device-side assert triggered|Check failed: |"
    r"terminate called after throwing|"
    r"Signal (?:11|6|7|4|8) \((?:SIGSEGV|SIGABRT|SIGBUS|SIGILL|SIGFPE)\) received|"
    r"exitcode\s*:\s*-(?:11|6|7|4|8)\b"
    # Lightning's DDP launcher kills its own process group when a child fails with an error.
    r"|Child process with PID \d+ terminated with code [1-9]"
)
# A CUDA kernel fault is sticky: every later CUDA call in that process fails, NCCL's too (torch
# then reports "unhandled cuda error", or aborts the communicator, and the other ranks see a
# remote error): nccl-error stands back. CUDA reports it at a later call than the kernel that
# faulted, so the traceback may point past the cause: trial-error says so.
KERNEL_FAULT = signatures(
    wording(
        "CUDA kernel fault",
        r"device-side assert triggered|an illegal memory access was encountered|"
        r"CUDA error: misaligned address|CUDA error: unspecified launch failure",
        "CUDA runtime error strings (cudaGetErrorString), raised by torch's C10_CUDA_CHECK",
        "CUDA 10-13; torch 1.x-2.13 (RuntimeError; torch.AcceleratorError in recent torch)",
        "torch.AcceleratorError: CUDA error: device-side assert triggered",
    ),
)
# Ray's words for a worker process that died without raising (Ray 0.8-2.60): the actor's or
# the task's death, and the exit detail the raylet adds.
WORKER_DIED = re.compile(
    r"The actor died unexpectedly|The actor is dead because its worker process has died|"
    r"The worker died unexpectedly|Worker unexpectedly exits|Worker exits unexpectedly"
)
# Ray's exit detail for a worker that ended by itself with a status (sys.exit, os._exit, a
# library calling exit()): a signal has no exit code, and Ray says "exit code None" for it.
SELF_EXIT = re.compile(r"Worker exits with an exit code (\d+)\b")
# The same, less 137 (128 + SIGKILL, as a wrapper reports a kill).
SELF_EXIT_NOT_KILL = re.compile(r"Worker exits with an exit code (?!137\b)\d+\b")
# error.txt's actor block ("pid: 26386") and Ray's log prefix ("(trainable pid=26386)").
_PID = re.compile(r"\bpid[:=]\s*(\d+)")
# Ray Train V2's controller lists its workers: "- (ip=10.0.0.1, pid=4845) world_rank=1, ...".
_WORKER_RANK = re.compile(r"\bpid=(\d+)\) world_rank=(\d+)")


def crash_lines(experiment: Experiment, failure: Failure, trial: Trial | None) -> list[LogEvent]:
    """The log lines of a crash of a worker whose failure this is: when `failure` is Ray's word
    for a worker's death, lines of the same trial or of a process it names by pid; in a Train
    V2 run, lines of any of the run's workers (a rank that crashes takes the others'
    collectives down with it: gloo's "Connection closed by peer", NCCL errors, and Train may
    report those instead). Empty when no such crash was read."""
    pids: set[int] = set()
    ids: set[str] = set()
    # (The literal screen first: asked of every failed trial of a sweep.)
    if may_match(WORKER_DIED, failure.joined) and WORKER_DIED.search(failure.joined):
        pids = {int(pid) for pid in _PID.findall(failure.joined)}
        ids = {trial.trial_id, trial.name} if trial is not None else set()
    if experiment.layout == Layout.TRAIN_V2:
        pids |= set(worker_ranks(experiment))
    if not pids and not ids:
        return []
    return [
        event
        for event in _crash_events(experiment.events)
        if event.pid in pids or (event.trial is not None and event.trial in ids)
    ]


# The last events list's crash lines: asked once per failed trial, and a sweep's logs keep
# tens of thousands of lines.
_CRASHES: list = [None, -1, []]
_CRASH_TABLE = signatures(("crash", CRASH.pattern))


def _crash_events(events: list[LogEvent]) -> list[LogEvent]:
    cached, length, crashes = _CRASHES
    if cached is not events or length != len(events):
        crashes = [hit.event for hit in search_events(_CRASH_TABLE, events)]
        _CRASHES[:] = [events, len(events), crashes]
    return crashes


def worker_ranks(experiment: Experiment) -> dict[int, int]:
    """Train workers' ranks by pid, from the controller's list of the workers it started."""
    ranks: dict[int, int] = {}
    for event in experiment.events:
        if event.kind == "worker-rank":
            match = _WORKER_RANK.search(event.line)
            if match:
                ranks[int(match[1])] = int(match[2])
    return ranks
