"""failure-not-reproduced (smoke --from): the failed trial's config runs cleanly now."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import SmokeRule
from ray_doctor.rules.failure_reproduced import RELAUNCH_EXAMPLE


class FailureNotReproduced(SmokeRule):
    """Re-run with its own config, resources and trainable, the failed trial ran the requested
    iterations without failing.

    Symptom:
        `ray-doctor smoke --from …` ran the trial again for `--iterations` iterations (by
        default, up to the iteration where the original failed) and the new run ended without
        an error.
    Likely cause:
        The original failure was transient or came from its surroundings: a node that has
        since been replaced, memory pressure from other trials running beside it, a storage or
        network outage, preemption. If fewer iterations ran than the original reached, the
        re-run may simply have stopped before the failing step.
    Evidence it uses:
        The original trial's headline finding, the iterations the re-run reached and the
        original's, and the re-run's peak host RSS and device memory.
    Fix:
        Resume the original run (`Tuner.restore(path, trainable, resume_errored=True)`) and
        consider `FailureConfig(max_failures=N)` so transient failures retry on their own. If
        the original failed on its own node only, look at that node (`ray-doctor smoke
        --address` runs the other stages there).
    References:
        - https://docs.ray.io/en/latest/tune/tutorials/tune-fault-tolerance.html
    """

    id = "failure-not-reproduced"
    title = "The failure does not reproduce"
    severity = Severity.WARNING
    smoke_example = RELAUNCH_EXAMPLE.format("tune_trial_error_trainable") + " --iterations 2"
