"""retries-exhausted: a trial failed more times than FailureConfig(max_failures) allowed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from ray_doctor.model import Experiment, TrialStatus
from ray_doctor.rules._base import Finding, Precedence, Rule, Severity, failure_evidence


class RetriesExhausted(Rule):
    """A trial failed more often than `FailureConfig(max_failures)` allowed, so Tune gave up.

    Symptom:
        A trial configured with retries ends in ERROR; its `error.txt` holds one
        `Failure # N` block per attempt.
    Likely cause:
        The same error on every attempt means retrying cannot help: the cause is in the code,
        the data or the environment, and the retries only restored from the last checkpoint
        into the same failure. Different errors on different attempts point at an unstable
        environment (nodes, network, storage).
    Evidence it uses:
        `max_failures` and the failure count from the newest `experiment_state-*.json`, and
        the `Failure # N` headers of the trial's `error.txt`.
    Fix:
        Look at the error of the last attempt (the finding quotes it) and fix that cause.
        Raise `FailureConfig(max_failures=...)` only when the failures are transient; then
        resume with `Tuner.restore(path, trainable, resume_errored=True)`.
    References:
        - https://docs.ray.io/en/latest/tune/api/doc/ray.tune.FailureConfig.html
        - https://docs.ray.io/en/latest/tune/tutorials/tune-fault-tol.html
    """

    id = "retries-exhausted"
    title = "Retries exhausted"
    severity = Severity.ERROR
    specificity = Precedence.RETRIES
    example = "fixtures/tune_retries_exhausted"

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        for trial in experiment.trials:
            allowed = trial.max_failures
            if trial.status != TrialStatus.ERROR or not allowed or allowed < 0:
                continue
            count = trial.failure_count
            if count <= allowed:
                continue
            kinds = Counter(f.summary for f in trial.failures)
            last = trial.failures[-1] if trial.failures else None
            if last is None:
                detail = "No error text was found."
            elif len(kinds) == 1:
                detail = f"Every attempt failed the same way: {last.summary}."
            else:
                detail = (
                    f"The attempts failed {len(kinds)} different ways; the last: {last.summary}."
                )
            message = (
                f"Trial {trial.trial_id} failed {count} times with max_failures={allowed}; "
                f"Tune stopped retrying. {detail}"
            )
            evidence = [f.source for f in trial.failures if f.source] + (
                failure_evidence(last)[1:] if last else []
            )
            if len(kinds) == 1:
                fix = (
                    "Retrying cannot help an error that repeats: fix its cause (see the last "
                    "failure), then resume with `Tuner.restore(path, trainable, "
                    "resume_errored=True)`."
                )
            else:
                fix = (
                    "The failures differ, which points at an unstable environment: check the "
                    "nodes and storage, and raise `FailureConfig(max_failures=...)` if they are "
                    "transient."
                )
            yield self.finding(experiment, message, fix, evidence, trial=trial)
