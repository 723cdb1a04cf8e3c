"""collective-failed (smoke): an allreduce that returned a wrong sum, or failed for a reason
that is neither a collective timeout nor an NCCL error."""

from smoke_runs import REPO

from ray_doctor.smoke._findings import classify
from ray_doctor.smoke.stages.collective import TRAIN_ERRORS_TABLES


def test_a_wrong_sum_on_one_rank(smoke_cpu):
    """The real ranks of the CPU smoke, one value edited as a faulty link would leave it."""
    from ray_doctor.smoke import SmokeOptions
    from ray_doctor.smoke.stages._common import Context
    from ray_doctor.smoke.stages.collective import analyse_ranks

    ranks = [dict(r) for r in smoke_cpu.stage("collective")["details"]["ranks"]]
    ranks[1]["value"], ranks[1]["ok"] = 2.0, False
    result = analyse_ranks(Context(SmokeOptions(), deadline=0), ranks, None, True, 5.0)
    (finding,) = result.findings
    assert finding.rule == "collective-failed"
    assert "rank 1 on" in finding.message and "got 2, expected 3" in finding.message


def test_error_text_goes_to_the_rule_that_owns_it():
    gloo = (REPO / "fixtures/train_v2_collective_timeout/driver.log").read_text()
    nccl = (REPO / "fixtures/edited/nccl_error/error.txt").read_text()
    assert classify(gloo, TRAIN_ERRORS_TABLES, "collective-failed")[0] == "collective-timeout"
    assert classify(nccl, TRAIN_ERRORS_TABLES, "collective-failed")[0] == "nccl-error"
    other = "RuntimeError: Connection reset by peer\n"
    assert classify(other, TRAIN_ERRORS_TABLES, "collective-failed")[0] == "collective-failed"
