"""trial-stalled: a trial went silent long before its siblings stopped reporting."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, Experiment, Trial, TrialStatus
from ray_doctor.rules._base import Rule, subject_name, time_budget, trial_subject

# A trial is stalled when its silence lasts this many report intervals, its own and the
# sweep's (the median of its siblings'), while the experiment kept going. No absolute floor:
# a sweep that reports ten times a second hangs as surely as one that reports every minute.
SILENCE_FACTOR = 10
# Trials a scheduler stopped (ASHA, HyperBand, median stopping) fall silent at the same rung:
# as many silent trials stopped at one iteration as this are a rung, not a hang.
RUNG_SIZE = 2


def _finished_itself(trial: Trial) -> bool:
    """The trial's last row says it was done (its trainable returned)."""
    return trial.last_result.get("done") is True


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _cadence(trial: Trial) -> float | None:
    history = trial.history
    if not history or history.rows < 2 or history.first_time is None or history.last_time is None:
        return None
    return max(1.0, (history.last_time - history.first_time) / (history.rows - 1))


class TrialStalled(Rule):
    """A trial stopped reporting long before the rest of the experiment did: a silent hang.

    Symptom:
        One trial's last result is much older than its siblings' (measured in its own report
        interval); it is left RUNNING, or a time budget (`TuneConfig(time_budget_s=...)`) ends
        it as TERMINATED without it having reported for a long time. No error is recorded.
    Likely cause:
        A hang: a deadlock in a data loader (worker processes, a full queue), a collective
        waiting for a rank that is gone, a blocked network or storage call, or a step that got
        dramatically slower (swapping, thermal or resource contention).
    Evidence it uses:
        Each trial's first and last report times and row count in result.json, the
        experiment's last activity, the sweep's own report interval (the median of the
        trials'), trial statuses and whether the last row says `done`, and a time-budget stop:
        the driver's line, or the TimeoutStopper the experiment state records (its class name
        read from the pickle bytes, never unpickled). Trials that fell silent together at one
        iteration were stopped by a scheduler's rung, not hung.
    Fix:
        Take stack traces of the live worker (`ray stack`, or `py-spy dump --pid <pid>` on its
        node; the pid is in the trial's last result) the next time it happens. Add timeouts
        to I/O and to `DataLoader` (`timeout=`), and report progress more often so a stall is
        visible sooner; Train's worker health checks
        (`RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S`) end such runs instead of waiting.
    References:
        - https://docs.ray.io/en/latest/ray-observability/user-guides/debug-apps/debug-hangs.html
        - https://docs.ray.io/en/latest/tune/api/doc/ray.tune.TuneConfig.html
    """

    id = "trial-stalled"
    title = "Trial stopped reporting"
    severity = Severity.WARNING
    example = "fixtures/tune_trial_stalled"

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        times = [t.last_result_time for t in experiment.trials if t.last_result_time]
        if len(times) < 2:
            return
        last_activity = max(times)
        budget = time_budget(experiment)
        sweep_cadence = _median([c for t in experiment.trials if (c := _cadence(t))])
        silent = []
        for trial in experiment.trials:
            cut_by_budget = budget is not None and trial.status == TrialStatus.TERMINATED
            if trial.status != TrialStatus.RUNNING and not cut_by_budget:
                continue
            if cut_by_budget and _finished_itself(trial):
                continue
            cadence = _cadence(trial)
            if cadence is None or trial.last_result_time is None:
                continue
            silence = last_activity - trial.last_result_time
            if silence >= SILENCE_FACTOR * max(cadence, sweep_cadence or cadence):
                silent.append((trial, silence, cadence))
        rungs = Counter(t.history.last_iteration for t, _, _ in silent if t.history)
        for trial, silence, cadence in silent:
            at_rung = trial.history and rungs[trial.history.last_iteration] >= RUNG_SIZE
            if trial.status == TrialStatus.TERMINATED and at_rung:
                continue  # stopped by a scheduler at a milestone
            yield self._finding(experiment, trial, silence, cadence, budget)

    def _finding(self, experiment, trial, silence, cadence, budget) -> Finding:
        history = trial.history
        message = (
            f"{subject_name(experiment, trial)} stopped reporting after iteration "
            f"{history.last_iteration}: its last result is {silence:.0f} s older than the "
            f"experiment's last activity, while it reported every {cadence:.0f} s before"
        )
        pid = trial.last_result.get("pid")
        host = trial.last_result.get("hostname") or trial.last_result.get("node_ip")
        if budget is not None and trial.status == TrialStatus.TERMINATED:
            message += ". The time budget then ended it as TERMINATED, hiding the hang"
        else:
            message += f". It is still {trial.status.value} on storage"
        message += "."
        evidence = [
            Evidence(
                history.path, history.rows, f"last row: training_iteration {history.last_iteration}"
            )
        ]
        if budget is not None:
            evidence.append(budget)
        where = f" (pid {pid} on {host})" if pid and host else ""
        fix = (
            f"Next time, take the hung worker's stack{where}: `ray stack` or `py-spy dump --pid "
            "PID`. Add timeouts to I/O and `DataLoader(timeout=...)`, and report more often."
        )
        return self.finding(
            experiment,
            message,
            fix,
            evidence,
            trial=trial,
            subject=f"stalled:{trial_subject(experiment, trial)}",
        )
