"""The smoke stages' verdicts on what a real GPU run recorded (fixtures/smoke: an H100, Ray
2.60, torch 2.11 with CUDA 13 and NCCL 2.28.9). CI has no GPU, so the probe and the rank
record come from that run's JSON report and go back through the same analysis."""

import json

from conftest import FIXTURES

from ray_doctor.smoke import SmokeOptions
from ray_doctor.smoke.stages._common import Context
from ray_doctor.smoke.stages.collective import analyse_ranks
from ray_doctor.smoke.stages.device import device_result

REPORT = json.loads((FIXTURES / "smoke" / "h100_smoke_gpu1.json").read_text())
STAGES = {stage["name"]: stage for stage in REPORT["stages"]}
RUN = {"seconds": 14.8, "finished": True, "out_of_time": False, "budget": 60, "trial_error": None}


def test_the_recorded_run_passed_every_stage():
    assert REPORT["summary"]["exit_code"] == 0
    assert {s["status"] for s in REPORT["stages"]} == {"pass"}


def test_an_h100_probe_passes_and_says_what_it_checked():
    probe = dict(STAGES["device"]["details"])
    result = device_result(Context(SmokeOptions(gpus=1), deadline=0), {"device": probe}, RUN)
    assert result.status.value == "pass" and not result.findings
    assert "NVIDIA H100 80GB HBM3" in result.message
    assert "allocated and released" in result.message


def test_the_same_probe_with_a_gpu_short_of_memory_warns():
    probe = json.loads(json.dumps(STAGES["device"]["details"]))
    (headroom,) = probe["headroom"]
    headroom.update(free_bytes=2 << 30, ok=False)  # another process holds the rest
    result = device_result(Context(SmokeOptions(gpus=1), deadline=0), {"device": probe}, RUN)
    assert [f.rule for f in result.findings] == ["memory-headroom-low"]


def test_one_nccl_rank_is_not_said_to_have_no_bandwidth():
    ranks = STAGES["collective"]["details"]["ranks"]
    assert ranks[0]["backend"] == "nccl" and ranks[0]["busbw_gbps"] == 0.0
    result = analyse_ranks(Context(SmokeOptions(gpus=1), deadline=0), ranks, None, True, 28.6)
    assert result.status.value == "pass"
    assert "1 rank (nccl, cuda:0)" in result.message
    assert "no link between devices tested" in result.message
    assert "0.00 GB/s" not in result.message
