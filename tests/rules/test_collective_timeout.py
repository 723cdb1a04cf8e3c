"""collective-timeout: a real gloo recv timeout in Ray Train V2, and NCCL's watchdog text."""

import pytest
from conftest import experiment_dir, findings_of, inspect_json

NCCL_WATCHDOG = (
    "[rank1]:[E1122 04:01:02.123456 4242 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
    "Timeout(ms)=600000) ran for 600043 milliseconds before timing out.\n"
    "[rank1]:[E1122 04:01:02.223456 4242 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
    "Exception (either an error or timeout) detected by watchdog at work: 1234, last enqueued NCCL work: "
    "1234, last completed NCCL work: 1233.\n"
)


def test_gloo_timeout_in_train_v2(fixtures):
    base = fixtures / "train_v2_collective_timeout"
    code, report = inspect_json(
        str(experiment_dir(fixtures, "train_v2_collective_timeout")),
        "--logs",
        str(base / "driver.log"),
    )
    assert code == 1
    (finding,) = findings_of(report, "collective-timeout")
    assert "recv after 10 s" in finding["message"]
    assert "on rank 0" in finding["message"]
    assert report["findings"][0]["rule"] == "collective-timeout"


def test_nccl_watchdog_names_op_timeout_and_progress():
    _, report = inspect_json("-", stdin=NCCL_WATCHDOG)
    (finding,) = findings_of(report, "collective-timeout")
    assert "ALLREDUCE (SeqNum 1234) after 600 s" in finding["message"]
    assert "last completed 1233" in finding["message"]
    assert not findings_of(report, "nccl-error"), "the timeout is the more specific finding"


def test_setup_timeout_points_at_the_network():
    text = "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/2 clients joined.\n"
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "collective-timeout")
    assert "never finished setting up" in finding["message"]


def test_near_miss_healthy_train_v2(fixtures):
    base = fixtures / "train_v2_healthy"
    _, report = inspect_json(
        str(experiment_dir(fixtures, "train_v2_healthy")),
        "--logs",
        str(base / "driver.log"),
        "--logs",
        str(base / "session_logs"),
    )
    assert not findings_of(report, "collective-timeout")


def test_flight_recorder_dump_signal_of_a_timeout():
    """torch 2.3+ (getNCCLWatchdogTimeoutErrorMsg): the dump notice can be all a paste keeps
    of the watchdog's timeout (CL-MVSNet #14, as posted)."""
    text = (
        "[rank0]:[E1213 17:24:49.328237228 ProcessGroupNCCL.cpp:1858] [PG ID 0 PG GUID "
        "0(default_pg) Rank 0] Received a dump signal due to a collective timeout from this "
        "local rank and we will try our best to dump the debug info. Last enqueued NCCL work: "
        "747, last completed NCCL work: 715.This is most likely caused by incorrect usages of "
        "collectives, e.g., wrong sizes used across ranks.\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "collective-timeout")
    assert "last enqueued work 747, last completed 715" in finding["message"]


# Torch's own healthy lines that name a timeout (read in torch 1.13.1 and 2.13's sources).
HEALTHY_TORCH_TIMEOUT_LINES = {
    "a client's first connect retry": (
        "[W1126 10:00:00.000 TCPStore.cpp:358] [c10d] TCP client failed to connect/validate to "
        "host 10.0.0.1:29500 - retrying (try=0, timeout=1800000ms, delay=1312ms): Connection "
        "refused"
    ),
    "the exit barrier the agent swallows": (
        "torch.distributed.DistStoreError: wait timeout after 300000ms, keys: "
        "/torchelastic/agent/terminal_state/last_member"
    ),
    "the keep-alive thread's warning": (
        "The node 'n1_1' has failed to send a keep-alive heartbeat to the rendezvous 'job' due "
        "to an error of type RendezvousTimeoutError."
    ),
    "a traceback's code line": "    tcp_store = TCPStore(hostname, port, world_size, False, timeout)",
}


@pytest.mark.parametrize("name", sorted(HEALTHY_TORCH_TIMEOUT_LINES))
def test_near_miss_torch_lines_that_only_name_a_timeout(name):
    _, report = inspect_json("-", stdin=HEALTHY_TORCH_TIMEOUT_LINES[name] + "\n")
    assert not findings_of(report, "collective-timeout"), name


def test_exit_barrier_traceback_of_a_finished_job_is_no_hang():
    text = (
        "Local worker group finished (SUCCEEDED). Waiting 300 seconds for other agents to finish\n"
        "Error waiting on exit barrier. Elapsed: 300.05 seconds\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/torch/distributed/elastic/agent/server/api.py", line 1007, '
        "in _exit_barrier\n"
        "    store_util.barrier(\n"
        "RuntimeError: Socket Timeout\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "collective-timeout")


def test_the_master_unreachable_is_a_setup_timeout():
    text = (
        "torch.distributed.DistNetworkError: The client socket has timed out after 1800000ms "
        "while trying to connect to (10.0.0.1, 29500).\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "collective-timeout")
    assert "never finished setting up" in finding["message"]


def test_the_watchdogs_backtrace_without_its_message():
    """A paste that kept the C++ frames of the watchdog's error and lost its first line
    (particleflow #390): WorkNCCL::checkTimeout throws only the timeout."""
    text = (
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::"
        "duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in /site-packages/"
        "torch/lib/libtorch_cuda.so)\n"
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x1554e9e16333 in "
        "/site-packages/torch/lib/libtorch_cuda.so)\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert findings_of(report, "collective-timeout")


def test_near_miss_the_watchdog_handler_alone():
    """The watchdog's other frames are on the stack of any error it reports (an NCCL error
    too): only checkTimeout says it was the timeout."""
    text = (
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x1554e9e16333 in "
        "/site-packages/torch/lib/libtorch_cuda.so)\n"
        "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x1554e9e1871c in "
        "/site-packages/torch/lib/libtorch_cuda.so)\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "collective-timeout")


def test_ascends_hccl_notify_wait_timeout():
    """LLaMA-Factory #975, as posted: a rank waited past HCCL_EXEC_TIMEOUT (CANN EI0002)."""
    text = (
        "npuSynchronizeDevice:/usr1/02/workspace/pytorch/torch_npu/csrc/core/npu/NPUStream.cpp:"
        "370 NPU error, error code is 107020.\n"
        "EI0002: The wait execution of the Notify register times out. Reason: The Notify "
        "register has not received the Notify record from remote rank [4294967295].base "
        "information: [streamID:[1], taskID[39], taskType[Notify Wait], tag[AllReduce_192.168"
        ".0.116%enp69s0_60000_0_1694500287022627].]\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert findings_of(report, "collective-timeout")


def test_jaxs_newer_start_up_barrier_wording():
    """AI-Hypercomputer/gpu-recipes #2, as posted: not every task registered in time."""
    text = (
        "Original error: DEADLINE_EXCEEDED: Barrier timed out. Id: [Init]Wait_for_all_tasks_to_"
        "register::0. This usually happens because a task triggered the barrier too early or "
        "too slowly.\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert findings_of(report, "collective-timeout")
