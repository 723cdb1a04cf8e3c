"""recovered-after-failure: a trial failed, was restored and still finished."""

from __future__ import annotations

from collections.abc import Iterator

from ray_doctor.model import Evidence, Experiment, Restart, Trial, TrialStatus
from ray_doctor.rules._base import Finding, Precedence, Rule, Severity


def _restored_from(trial: Trial, restart: Restart) -> str:
    if restart.to_iteration is None:
        return "restarted"
    if restart.to_iteration <= 1:
        return "restarted from scratch (no checkpoint)"
    for checkpoint in trial.checkpoints:
        if checkpoint.iteration == restart.to_iteration - 1:
            return f"restored from {checkpoint.name} (iteration {checkpoint.iteration})"
    return f"restored from a checkpoint at iteration {restart.to_iteration - 1}"


class RecoveredAfterFailure(Rule):
    """A trial failed, Tune restored it, and it finished: the retry worked, at a cost.

    Symptom:
        A TERMINATED trial has an `error.txt`, and its `result.json` shows
        `training_iteration` going back (or repeating) where `iterations_since_restore`
        starts again at 1.
    Likely cause:
        A transient error (a lost node, a network or storage hiccup, a preemption) that
        `FailureConfig(max_failures=...)` absorbed. Every iteration after the checkpoint it
        restored from ran twice.
    Evidence it uses:
        The `Failure # N` blocks of `error.txt`, the trial's final status, and the restart
        points in `result.json`, matched to the checkpoints reported at those iterations.
    Fix:
        Nothing is broken. If restarts are frequent or lose many iterations, checkpoint more
        often and look at the failure's cause; a failure that repeats in many trials is
        worth fixing even when retries hide it.
    References:
        - https://docs.ray.io/en/latest/tune/tutorials/tune-fault-tol.html
        - https://docs.ray.io/en/latest/tune/tutorials/tune-trial-checkpoints.html
    """

    id = "recovered-after-failure"
    title = "Trial recovered after a failure"
    severity = Severity.INFO
    specificity = Precedence.INCOMPLETE
    example = "fixtures/tune_recovered"

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        for trial in experiment.trials:
            if trial.status != TrialStatus.TERMINATED or trial.failure_count == 0:
                continue
            restarts = trial.history.restarts if trial.history else []
            causes = sorted({f.summary for f in trial.failures})
            message = f"Trial {trial.trial_id} failed {trial.failure_count} time(s)"
            if causes:
                message += f" ({'; '.join(causes)})"
            message += " and recovered"
            lost = [r.iterations_lost for r in restarts if r.iterations_lost is not None]
            if restarts:
                message += ": " + "; ".join(_restored_from(trial, r) for r in restarts)
            if lost:
                message += f". {sum(lost)} iteration(s) ran again"
            if trial.iterations is not None:
                message += f"; it finished at iteration {trial.iterations}"
            message += "."
            evidence = [f.source for f in trial.failures if f.source]
            if trial.history:
                evidence += [
                    Evidence(
                        trial.history.path,
                        r.line,
                        f"training_iteration {r.from_iteration} -> {r.to_iteration}, "
                        "iterations_since_restore 1",
                    )
                    for r in restarts
                ]
            fix = (
                "No action needed. If this happens often, find the failure's cause and "
                "checkpoint more often so a restart loses less work."
            )
            yield self.finding(experiment, message, fix, evidence, trial=trial)
