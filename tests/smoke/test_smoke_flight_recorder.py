"""The collective stage's rank attribution, fed the real Flight Recorder dumps of a Train run
in which rank 1 skipped an allreduce (as the probes push them to the driver: JSON text)."""

from ray_doctor.smoke._flight_recorder import attribute_failure
from ray_doctor.smoke._model import StageResult, StageStatus

DUMPS = "train_v2_fr_skipped_collective/fr_dumps"


def _failed() -> StageResult:
    return StageResult(
        "collective", StageStatus.FAIL, message="The allreduce did not complete within 60 s."
    )


def test_failed_stage_leads_with_the_rank_that_never_arrived(fixtures):
    values = {f"fr:{r}": (fixtures / DUMPS / f"rank_{r}.json").read_text() for r in (0, 1)}
    values["rank:0"] = {"rank": 0, "stage": "joined"}
    result = attribute_failure(_failed(), values)
    assert result.findings[0].rule == "collective-desync"
    assert result.message.startswith("Rank 1 never reached collective #16 gloo:all_reduce")
    assert result.message.endswith("The allreduce did not complete within 60 s.")
    assert result.details["flight_recorder_dumps"] == [0, 1]


def test_one_dump_names_the_rank_that_left_none(fixtures):
    values = {"fr:0": (fixtures / DUMPS / "rank_0.json").read_text()}
    result = attribute_failure(_failed(), values)
    assert "Rank 0 was in collective #16" in result.findings[0].message
    assert "no Flight Recorder dump from rank 1" in result.findings[0].message


def test_a_passed_stage_or_no_dump_changes_nothing(fixtures):
    passed = StageResult("collective", StageStatus.PASS, message="ok")
    text = (fixtures / DUMPS / "rank_0.json").read_text()
    assert attribute_failure(passed, {"fr:0": text}).findings == []
    assert attribute_failure(_failed(), {}).findings == []
