"""failure-changed (smoke --from): the re-run trial fails, but not as the original did."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import SmokeRule
from ray_doctor.rules.failure_reproduced import RELAUNCH_EXAMPLE


class FailureChanged(SmokeRule):
    """Re-run with its own config, resources and trainable, the trial fails, but ray-doctor
    reads a different cause than in the original run (or the original did not fail at all).

    Symptom:
        `ray-doctor smoke --from …` ran the trial again and `inspect` on the new run names a
        different rule or exception type than on the original.
    Likely cause:
        The environment differs from the original run's: a different node, package versions,
        data, or storage; or the trainable changed since. The new failure may also be what
        the original hid (it failed earlier this time).
    Evidence it uses:
        The original trial's headline finding and the new run's findings, with the iteration
        each failed at.
    Fix:
        Fix the new failure first (its finding and fix are listed as related), then re-run
        the smoke to see whether the original one comes back.
    References:
        - https://docs.ray.io/en/latest/tune/tutorials/tune-fault-tolerance.html
    """

    id = "failure-changed"
    title = "The re-run fails differently"
    severity = Severity.ERROR
    smoke_example = RELAUNCH_EXAMPLE.format("tune_missing_module_trainable")
