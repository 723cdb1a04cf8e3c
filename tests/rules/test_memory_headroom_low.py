"""memory-headroom-low (smoke): a node already at Ray's memory-monitor threshold.

The probe runs in-process, for real, with RAY_memory_usage_threshold set so low that this
machine is past it: what a node that is nearly full looks like to Ray's memory monitor.
"""

from ray_doctor.smoke import SmokeOptions, _probes
from ray_doctor.smoke.stages._common import Context
from ray_doctor.smoke.stages.device import device_result

RUN = {"seconds": 1.0, "finished": True, "out_of_time": False, "budget": 60, "trial_error": None}


def _device(monkeypatch, threshold: str | None):
    if threshold is not None:
        monkeypatch.setenv("RAY_memory_usage_threshold", threshold)
    probe = _probes.device_probe(0, 0.5, 1 << 20)
    return device_result(Context(SmokeOptions(), deadline=0), {"device": probe}, RUN)


def test_a_node_past_the_threshold_is_a_warning(monkeypatch):
    result = _device(monkeypatch, "0.001")
    (finding,) = result.findings
    assert finding.rule == "memory-headroom-low" and finding.severity.value == "warning"
    assert "from Ray's memory-monitor threshold (0.001" in finding.message
    assert result.status.value == "pass", "a warning does not fail the stage"


def test_near_miss_the_default_threshold(monkeypatch):
    monkeypatch.delenv("RAY_memory_usage_threshold", raising=False)
    assert not _device(monkeypatch, None).findings
