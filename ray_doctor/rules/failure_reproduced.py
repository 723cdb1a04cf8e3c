"""failure-reproduced (smoke --from): the failed trial fails again, of the same cause."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import SmokeRule

# The doc example of the relaunch rules: tune_trial_error's failed trial with a trainable
# from the fixture generator (its own, or one that has changed since).
RELAUNCH_EXAMPLE = (
    "ray-doctor smoke --from fixtures/tune_trial_error/ray_results/tune_trial_error "
    "--trial b0523_00002 --entrypoint fixtures/generate.py:{}"
)


class FailureReproduced(SmokeRule):
    """Re-run with its own config, resources and trainable, the failed trial fails again, and
    ray-doctor reads the same cause in the new run as in the original.

    Symptom:
        `ray-doctor smoke --from EXP --trial ID --entrypoint module:function` ran the trial
        again for `--iterations` iterations; `inspect` on the new run names the same rule (and,
        for an exception, the same exception type) as on the original.
    Likely cause:
        The failure is deterministic for this config on this cluster: a bug, a data problem or
        a resource limit the config always hits (the same batch size runs out of memory
        again). It is not a flaky node or a transient outage.
    Evidence it uses:
        The original trial's headline finding, the new run's findings (from ray-doctor's own
        rules on the experiment the re-run wrote), the iteration each failed at, and the peak
        host RSS and device memory sampled in the trial's process.
    Fix:
        Fix the cause the original finding names (its fix is repeated here). Retrying the same
        config, or raising `max_failures`, will not help. For an OOM, the peaks show how much
        the config needs: lower the batch size or give each trial more memory.
    References:
        - https://docs.ray.io/en/latest/tune/tutorials/tune-fault-tolerance.html
    """

    id = "failure-reproduced"
    title = "The failure reproduces"
    severity = Severity.ERROR
    smoke_example = RELAUNCH_EXAMPLE.format("tune_trial_error_trainable")
