"""collective-timeout: a real gloo recv timeout in Ray Train V2, and NCCL's watchdog text."""

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
