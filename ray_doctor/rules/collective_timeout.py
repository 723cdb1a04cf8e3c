"""collective-timeout: a rank hung in a collective, or the process group never formed."""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment, Failure
from ray_doctor.rules._base import Precedence, subject_name
from ray_doctor.rules._signature import (
    Hit,
    SignatureRule,
    first_match,
    hit_text,
    signatures,
    wording,
)

NCCL_WATCHDOG = "torch c10d ProcessGroupNCCL watchdog"
# torchelastic's exit barrier: an agent whose workers finished waits for the others, and logs and
# swallows the timeout ("Error waiting on exit barrier", torch/distributed/elastic/agent/server/
# api.py): the job succeeded.
EXIT_BARRIER_KEY = "/torchelastic/agent/terminal_state"
EXIT_BARRIER = re.compile(rf"Error waiting on exit barrier|\bin _exit_barrier\b|{EXIT_BARRIER_KEY}")
HANG = signatures(
    # Ascend's collective library: a rank waited past HCCL_EXEC_TIMEOUT for a peer's record
    # (CANN error code EI0002, printed through torch_npu; LLaMA-Factory #975).
    wording(
        "HCCL notify wait timeout",
        r"EI0002: The wait execution of the Notify register times? out",
        "Ascend CANN HCCL (error code EI0002) through torch_npu",
        "CANN 6-8; torch_npu 1.11-2.x",
        "EI0002: The wait execution of the Notify register times out. Reason: The Notify "
        "register has not received the Notify record from remote rank [4294967295].",
    ),
    wording(
        "NCCL watchdog timeout",
        r"Watchdog caught collective operation timeout|Caught collective operation timeout",
        NCCL_WATCHDOG,
        "torch 1.8-2.13 ('Caught ...' before 1.9)",
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800049 "
        "milliseconds before timing out.",
    ),
    # The C++ backtrace torch prints with the watchdog's error (c10::Error keeps the stack it
    # was thrown on): WorkNCCL::checkTimeout throws only the timeout, so its frame stands for
    # the message when a paste kept the frames and lost that line.
    wording(
        "NCCL watchdog timeout (backtrace)",
        r"c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout\(",
        NCCL_WATCHDOG + " (the c10 backtrace of its error)",
        "torch 2.x",
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::"
        "duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in libtorch_cuda.so)",
    ),
    wording(
        "NCCL work timed out",
        r"WorkNCCL\(.*?\) timed out in (?:call to wait|blocking wait)|Timeout at NCCL work: \d+",
        NCCL_WATCHDOG,
        "torch 1.9-2.13",
        "NCCL communicator was aborted on rank 1. Original reason for failure was: Work: "
        "WorkNCCL(OpType=ALLREDUCE, TensorShape=[1], Timeout(ms)=2000) timed out in call to wait().",
    ),
    wording(
        "NCCL timeout dump",
        r"Received a dump signal due to a collective timeout",
        "torch c10d ProcessGroupNCCL getNCCLWatchdogTimeoutErrorMsg (flight recorder dump)",
        "torch 2.3-2.13",
        "[PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective "
        "timeout from this local rank and we will try our best to dump the debug info. Last "
        "enqueued NCCL work: 747, last completed NCCL work: 715.",
    ),
    wording(
        "NCCL watchdog stuck",
        r"watchdog got stuck for \d+ seconds|Heartbeat monitor timed out",
        "torch c10d ProcessGroupNCCL heartbeat monitor",
        "torch 2.2-2.13",
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in "
        "monitoring enqueued collectives.",
    ),
    wording(
        "gloo timeout",
        r"Timed out waiting (\d+)ms for (recv|send) operation to complete",
        "gloo TCP transport (third_party/gloo/gloo/transport/tcp/unbound_buffer.cc)",
        "torch 1.x-2.13",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
        "waiting 1800000ms for recv operation to complete",
    ),
    wording(
        "gloo timeout",
        r"\[[^]]*gloo[^]]*\] Timed out",
        "gloo (third_party/gloo)",
        "torch 1.x-2.13",
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:575] Timed out",
    ),
    wording(
        "monitored barrier",
        r"Rank (\d+) failed to pass monitoredBarrier in (\d+) ms|"
        # Rank 0's own view (ProcessGroupGloo::monitoredBarrier): the ranks that did not come,
        # or that it timed out waiting (torch 1.10-2.13).
        r"Ranks [\d, ]+ failed to pass monitoredBarrier in \d+ ms|"
        r"Rank \d+ timed out in monitoredBarrier after \d+ ms",
        "torch c10d ProcessGroupGloo::monitoredBarrier",
        "torch 1.9-2.13",
        "RuntimeError: Rank 1 failed to pass monitoredBarrier in 1800000 ms",
    ),
    wording(
        "Ray Train collective timeout",
        r"The collective operation timed out after|have not joined the collective operation",
        "Ray Train worker group (ray/train)",
        "Ray 2.x",
        "The collective operation timed out after 30 seconds.",
    ),
    wording(
        "Ray Train NCCL hang",
        r"NCCLHangError",
        "Ray Train",
        "Ray 2.x",
        "NCCLHangError",
    ),
    wording(
        "store-based barrier",
        r"Timed out initializing process group in store based barrier",
        "torch.distributed distributed_c10d._store_based_barrier",
        "torch 1.8-2.0",
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, "
        "for key: store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)",
    ),
    wording(
        "rendezvous",
        # Not the keep-alive thread's warning naming the class ("due to an error of type
        # RendezvousTimeoutError"), a `timeout=` field or a `TCPStore(..., timeout)` code line,
        # nor the exit barrier's wait, which the agent logs and swallows.
        r"(?<!an error of type )RendezvousTimeoutError|"
        rf"DistStoreError: (?!{EXIT_BARRIER_KEY}).*?[Tt]imed? ?out\b(?!\s*=)(?!.*{EXIT_BARRIER_KEY})|"
        r"Socket Timeout|TCPStore.*[Tt]imed out|"
        rf"wait timeout after \d+ms(?!, keys: {EXIT_BARRIER_KEY})|"
        r"Timed out after \d+ seconds waiting for clients",
        "torch TCPStore / torchelastic rendezvous (torch/csrc/distributed/c10d/TCPStore.cpp)",
        "torch 1.x-2.13",
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 "
        "clients joined.",
    ),
    wording(
        "gloo timeout",
        r"\] (?:Read|Write|Connect) timeout \[|Application timeout caused pair closure",
        "gloo's TCP transport (third_party/gloo/gloo/transport/tcp/pair.cc, unbound_buffer.cc): "
        "a peer sent nothing within the process group's timeout, then every pair is closed",
        "torch 1.x-2.13",
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read timeout "
        "[10.0.0.2]:41532",
    ),
    wording(
        "rendezvous",
        r"The client socket has timed out after \S+ while trying to connect to|"
        r"TCP client failed to connect/validate to host \S+ - timed out|"
        r"timed out waiting for all \d+ members to join|Timeout waiting for key: ",
        "torch c10d clients reaching the store on MASTER_ADDR:MASTER_PORT (torch/csrc/"
        "distributed/c10d/socket.cpp, TCPStore.cpp, FileStore.cpp) and torchelastic's "
        "_check_full_rank (torch/distributed/elastic/utils/distributed.py)",
        "torch 1.x-2.13",
        "torch.distributed.DistNetworkError: The client socket has timed out after 1800000ms "
        "while trying to connect to (10.0.0.1, 29500).",
    ),
    wording(
        "rendezvous",
        r"gloo/http_store\.cc:\d+\] Wait timeout|Timed out waiting for tasks to start\. Please "
        r"check connectivity between servers|DEADLINE_EXCEEDED: Barrier timed out\. "
        # (newer JAX: "Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0")
        r"(?:Barrier_id|Id: )",
        "Horovod's gloo rendezvous (horovod/common/gloo/http_store.cc) and driver service "
        "(horovod/runner/common/service/driver_service.py); JAX's coordination service barrier "
        "(xla/tsl coordination_service)",
        "Horovod 0.19-0.28; JAX 0.4",
        "terminate called after throwing an instance of 'gloo::IoException'\n  what():  "
        "[horovod/common/gloo/http_store.cc:53] Wait timeout for key(s): 0",
    ),
    wording(
        "rabit poll timeout",
        r"rabit/internal/socket\.h:\d+: Poll timeout",
        "XGBoost's rabit allreduce (rabit/include/rabit/internal/socket.h, PollHelper: "
        "LOG(FATAL) when a peer sends nothing within rabit_timeout), through xgboost_ray and "
        "dask",
        "XGBoost 1.x",
        "xgboost.core.XGBoostError: [23:55:55] /workspace/rabit/include/rabit/internal/socket.h:"
        "170: Poll timeout",
    ),
    wording(
        "Horovod stall",
        r"submitted to be reduced, gathered or broadcasted by subset of ranks",
        "Horovod stall inspector (horovod/common/stall_inspector.cc)",
        "Horovod 0.x",
        "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of "
        "ranks and are waiting for remainder of ranks for more than 60 seconds.",
    ),
)
NCCL_WORK = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+).*?Timeout\(ms\)=(\d+)\)")
GLOO = re.compile(r"Timed out waiting (\d+)ms for (recv|send) operation")
BARRIER = re.compile(r"Rank (\d+) failed to pass monitoredBarrier in (\d+) ms")
NOT_JOINED = re.compile(r"have not joined the collective operation: \[([\d,\s]+)\]")
LAST_WORK = re.compile(
    r"[Ll]ast enqueued (?:NCCL )?work: (\d+), last completed (?:NCCL )?work: (\d+)"
)
SETUP = ("store-based barrier", "rendezvous")


class CollectiveTimeout(SignatureRule):
    """A collective (allreduce, barrier, send/recv) timed out: a rank hung, died, or never joined.

    Symptom:
        Training stops with an NCCL watchdog timeout ("Watchdog caught collective operation
        timeout: WorkNCCL(SeqNum=…, OpType=ALLREDUCE, … Timeout(ms)=600000)"), gloo's "Timed
        out waiting Nms for recv operation to complete", "Rank N failed to pass
        monitoredBarrier", Ray Train's collective timeout, or the process group never forms
        (store-based barrier, rendezvous or TCPStore timeouts).
    Likely cause:
        Ranks did not call the same collectives: one took another code path (a condition on
        the rank, `ray.train.report` called on some ranks only, uneven data so one rank ran out
        of batches), one rank crashed or was killed (its own error is the real cause), or one
        is much slower. When the group never forms, ranks cannot reach each other: a firewall
        between nodes, the wrong network interface, or a rank that never started.
    Evidence it uses:
        The timeout text in error.txt, the driver log or the Train worker logs: operation,
        timeout, sequence numbers and the ranks named, when the text has them.
    Fix:
        Make every rank run the same sequence of collectives (report from every rank,
        `DistributedSampler` with `drop_last=True` for even batches). Look for an earlier
        error or kill on the rank that did not join. For set-up timeouts, open the ports
        between nodes and set `NCCL_SOCKET_IFNAME` / `GLOO_SOCKET_IFNAME`. Raise the timeout
        (`TorchConfig(timeout_s=...)`) only for genuinely slow steps such as saving a large
        checkpoint.
    References:
        - https://docs.ray.io/en/latest/train/user-guides/debugging.html
        - https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications
    """

    id = "collective-timeout"
    title = "Collective operation timed out"
    severity = Severity.ERROR
    commands = ("inspect", "smoke")
    specificity = Precedence.HANG
    example = "fixtures/train_v2_collective_timeout"
    signatures = HANG

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        return failure is not None and EXIT_BARRIER.search(failure.joined) is not None

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        who = subject_name(experiment, hit.trial)
        text = hit_text(hit)
        details = []
        nccl = NCCL_WORK.search(text)
        if nccl:
            details.append(
                f"{nccl.group(2)} (SeqNum {nccl.group(1)}) after {int(nccl.group(3)) // 1000} s"
            )
        gloo = first_match(hit, GLOO)
        if gloo:
            details.append(f"{gloo.group(2)} after {int(gloo.group(1)) / 1000:g} s")
        barrier = BARRIER.search(text)
        if barrier:
            details.append(f"rank {barrier.group(1)} missed the barrier ({barrier.group(2)} ms)")
        joined = NOT_JOINED.search(text)
        if joined:
            details.append(f"ranks that never joined: {joined.group(1).strip()}")
        progress = LAST_WORK.search(text)
        if progress:
            details.append(
                f"last enqueued work {progress.group(1)}, last completed {progress.group(2)}"
            )
        ranks = hit.failure.ranks if hit.failure else []
        where = f" on rank {', '.join(map(str, ranks))}" if ranks else ""
        if hit.signature.label in SETUP:
            message = (
                f"{who}'s process group never finished setting up{where} ({hit.signature.label} "
                "timeout): the ranks could not reach each other or one never started."
            )
            fix = (
                "Check that every worker started (look for its own error) and that the nodes can "
                "reach each other on the master port and NCCL/gloo ports (firewalls, security "
                "groups); pin the interface with `NCCL_SOCKET_IFNAME` / `GLOO_SOCKET_IFNAME`."
            )
        else:
            message = f"{who} hung in a collective{where} ({hit.signature.label}"
            message += f": {'; '.join(details)})" if details else ")"
            message += (
                ". The rank that timed out was waiting for another rank that took a different "
                "code path, crashed or stalled."
            )
            fix = (
                "Make every rank run the same collectives (call `ray.train.report` on every rank; "
                "even out batches with `DistributedSampler(drop_last=True)`); look for an earlier "
                "error or kill on the other ranks. Raise `TorchConfig(timeout_s=...)` only for "
                "steps that are genuinely slow."
            )
        return message, fix
