"""device-unavailable (smoke): a trial given a GPU whose torch sees none.

This machine has no GPU, so the probe is run in-process, for real, with --gpus 1: what a
CPU-only torch build reports inside a trial that Ray gave a GPU.
"""

from ray_doctor.smoke import SmokeOptions, _probes
from ray_doctor.smoke.stages._common import Context
from ray_doctor.smoke.stages.device import device_result

RUN = {"seconds": 1.0, "finished": True, "out_of_time": False, "budget": 60, "trial_error": None}


def _result(gpus: int):
    probe = _probes.device_probe(gpus, 0.5, 1 << 20)
    return probe, device_result(
        Context(SmokeOptions(gpus=gpus), deadline=0), {"device": probe}, RUN
    )


def test_a_gpu_torch_cannot_see(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # what Ray sets for a trial given GPU 0
    probe, result = _result(gpus=1)
    assert probe["device_count"] == 0
    assert result.status.value == "fail"
    (finding,) = result.findings
    assert finding.rule == "device-unavailable"
    assert "CUDA_VISIBLE_DEVICES='0'" in finding.message and "torch sees 0" in finding.message
    assert "CPU-only build" in finding.message


def test_near_miss_the_cpu_path():
    _, result = _result(gpus=0)
    assert result.status.value == "pass" and not result.findings
