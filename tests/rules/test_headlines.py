"""Every failing fixture gets its expected rule as the headline; healthy ones no error."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, inspect_json

# fixture -> the rule that must lead the report (its first finding).
HEADLINES = {
    "tune_trial_error": "trial-error",
    "tune_retries_exhausted": "retries-exhausted",
    "tune_sigkill": "oom-killed-by-os",
    "tune_worker_segfault": "trial-error",
    "tune_pbt_checkpoint_gone": "checkpoint-missing",
    "tune_stopper_stop_all": "trial-incomplete",
    "tune_corrupt_checkpoint": "checkpoint-corrupt",
    "tune_driver_killed": "trial-incomplete",
    "tune_oom_memory_monitor": "oom-ray-memory-monitor",
    "train_v2_rank_failure": "trial-error",
    "train_v2_worker_segfault": "trial-error",
    "train_v2_collective_timeout": "collective-timeout",
    "train_v1_error": "trial-error",
    "tune_state_dict_mismatch": "state-dict-mismatch",
    "tune_port_conflict": "port-conflict",
    "tune_disk_full": "disk-full",
    "tune_missing_module": "missing-module",
    "tune_device_mismatch": "device-mismatch",
    "tune_storage_unreachable": "storage-unreachable",
    "tune_insufficient_resources": "resources-insufficient",
    "tune_no_checkpoint": "retries-exhausted",
    "tune_config_correlated": "trial-error",
    "tune_storage_full": "disk-full",
    "train_v2_oom_rank": "oom-ray-memory-monitor",
    "train_v2_fr_skipped_collective": "collective-desync",
    "train_v2_fr_shape_mismatch": "collective-desync",
    "train_v2_fr_rank_killed": "collective-desync",
}
HEALTHY = [
    "tune_healthy",
    "train_v2_healthy",
    "tune_recovered",
    "tune_nan_metrics",
    "tune_trial_stalled",
]


def inspect_fixture(fixtures, scenario: str) -> tuple[int, dict]:
    base = fixtures / scenario
    args = [str(base)]
    for log in ("driver.log", "session_logs", "fr_dumps"):
        if (base / log).exists():
            args += ["--logs", str(base / log)]
    return inspect_json(*args)


@pytest.mark.parametrize("scenario", sorted(HEADLINES))
def test_expected_headline(fixtures, scenario):
    assert (FIXTURES / scenario).is_dir(), f"fixture {scenario} missing: run `make fixtures`"
    code, report = inspect_fixture(fixtures, scenario)
    assert code == 1
    assert report["findings"][0]["rule"] == HEADLINES[scenario], [
        (f["rule"], f["message"][:80]) for f in report["findings"]
    ]


@pytest.mark.parametrize("scenario", HEALTHY)
def test_no_error_on_runs_that_finished(fixtures, scenario):
    code, report = inspect_fixture(fixtures, scenario)
    assert code == 0
    assert not [f for f in report["findings"] if f["severity"] == "error"]
