"""trial-incomplete: trials were left PENDING / RUNNING / PAUSED when the experiment stopped."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

from ray_doctor.model import Evidence, Experiment, Failure, LogEvent
from ray_doctor.rules._base import (
    Finding,
    Precedence,
    Rule,
    Severity,
    failure_evidence,
    failure_subject,
    own_stop_all,
    stop_subject,
    time_budget,
)

SHOWN = 5


# TuneError's text (ray/tune/tune.py): ('Trials did not complete', [trial_a, trial_b]).
TRIALS_INCOMPLETE = re.compile(r"Trials did not complete")
TRIAL_LIST = re.compile(r"Trials did not complete'?,?:? ?\[([^\]]*)\]")


def says_trials_incomplete(failure: Failure) -> bool:
    """The failure is Tune's summary that trials did not complete, nothing more."""
    # A traceback pasted without its last line still shows Tune's own `raise TuneError(
    # "Trials did not complete", ...)` source line.
    text = failure.summary if failure.exc_type else failure.text
    return failure.exc_type in ("TuneError", None) and bool(TRIALS_INCOMPLETE.search(text or ""))


class TrialIncomplete(Rule):
    """Trials never finished: the experiment stopped while they were pending, running or paused.

    Symptom:
        The newest `experiment_state-*.json` lists trials as PENDING, RUNNING or PAUSED, and
        nothing is running any more; or the driver log says "Trials did not complete"; or
        trials are TERMINATED without ever having started (no start time, no result): a time
        budget (`TuneConfig(time_budget_s=...)`) or a stopper ended the run while they waited.
    Likely cause:
        The driver process stopped before the sweep ended: it was killed (the head node ran
        out of memory, the job or pod was preempted or hit a time limit, someone pressed
        Ctrl-C) or it crashed; or the time budget ran out while trials waited for resources
        (resources-insufficient says when the logs show why they waited). Tune writes trial
        states only from the driver, so trials it was running at that moment stay RUNNING on
        storage.
    Evidence it uses:
        Trial statuses in the newest `experiment_state-*.json`, the time that file was
        written, interrupt and "Trials did not complete" lines in the driver log.
    Fix:
        Resume the sweep: `Tuner.restore(path, trainable, resume_unfinished=True)` continues
        unfinished trials from their last checkpoint. Find out why the driver stopped (its
        log, `dmesg` on the head node for the OOM killer, the job scheduler) and run it where
        it can finish, e.g. with `ray job submit`.
    References:
        - https://docs.ray.io/en/latest/tune/tutorials/tune-fault-tol.html
        - https://docs.ray.io/en/latest/tune/api/doc/ray.tune.Tuner.restore.html
    """

    id = "trial-incomplete"
    title = "Trials did not complete"
    severity = Severity.ERROR
    specificity = Precedence.INCOMPLETE
    example = "fixtures/tune_driver_killed"

    def _from_tune_error(self, experiment: Experiment) -> Iterator[Finding]:
        """The driver's own TuneError('Trials did not complete', [...]) (`tune.run` raises it;
        `Tuner.fit` logs it): Tune's word for trials that did not finish. Any other error in
        the same text says more, and leads (see `Precedence`)."""
        for index, failure in enumerate(experiment.failures):
            if not says_trials_incomplete(failure):
                continue
            found = failure.evidence_for(TRIALS_INCOMPLETE)
            evidence = [found[0]] if found else failure_evidence(failure)
            listed = TRIAL_LIST.search(failure.text)
            names = f" ({listed.group(1)[:200]})" if listed else ""
            yield self.finding(
                experiment,
                f"Tune stopped with trials that did not complete{names}; the error that ended "
                "them is not in this text.",
                self._fix(),
                evidence,
                subject=failure_subject(experiment, index),
            )

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        yield from self._from_tune_error(experiment)
        unfinished = [t for t in experiment.trials if t.unfinished and t.in_state]
        stop_events = [
            e for e in experiment.events if e.kind in ("interrupted", "trials-incomplete")
        ]
        if not unfinished:
            if not experiment.trials and any(e.kind == "trials-incomplete" for e in stop_events):
                yield self.finding(
                    experiment,
                    "The driver reported that trials did not complete.",
                    self._fix(),
                    [e.source for e in stop_events],
                    subject=stop_subject(experiment),
                )
            return
        counts = Counter(
            "TERMINATED before starting" if t.never_started else t.status.value for t in unfinished
        )
        breakdown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        names = ", ".join(t.trial_id for t in unfinished[:SHOWN])
        if len(unfinished) > SHOWN:
            names += f" and {len(unfinished) - SHOWN} more"
        resumable = sum(1 for t in unfinished if t.last_checkpoint is not None)
        message = (
            f"{len(unfinished)} of {len(experiment.trials)} trials never finished "
            f"({breakdown}: {names}). "
        )
        interrupted = next((e for e in stop_events if e.kind == "interrupted"), None)
        before_start = counts["TERMINATED before starting"]
        budget = time_budget(experiment) if before_start else None
        stopper = own_stop_all(experiment) if before_start and budget is None else None
        if stopper is not None:
            message += (
                "The experiment's own stopper ended the run while they waited (its `stop_all()` "
                "returned True); Tune marks such trials TERMINATED though they never ran"
            )
            stop_events.append(LogEvent("stopper", stopper))
        elif budget is not None:
            # Tune ends the trials still waiting (for resources, or their turn) TERMINATED.
            message += (
                "The experiment's time budget ended the run while they waited; Tune marks such "
                "trials TERMINATED though they never ran"
            )
            stop_events.append(LogEvent("budget", budget))
        else:
            message += "The driver stopped before they completed"
            if experiment.failures:
                message += f"; the driver crashed with {experiment.failures[-1].summary}"
            elif interrupted is not None:
                message += f"; its log shows an interrupt ({interrupted.source.excerpt})"
        message += (
            f". {resumable} of them {'has' if resumable == 1 else 'have'} a checkpoint to resume "
            "from."
            if resumable
            else ". None of them has a checkpoint: resuming restarts them from scratch."
        )
        evidence = [
            Evidence(
                f"{experiment.path}/{experiment.state_file}"
                if experiment.state_file
                else experiment.path,
                None,
                f"{t.trial_id}: status {t.status.value}"
                + (", no start time and no result" if t.never_started else "")
                + (f", last iteration {t.iterations}" if t.iterations else ""),
            )
            for t in unfinished[:SHOWN]
        ] + [e.source for e in stop_events[:3]]
        trial = unfinished[0] if len(unfinished) == 1 else None
        # One subject with the driver's crash (if any): a rule that explains the crash leads.
        yield self.finding(
            experiment,
            message,
            self._fix(),
            evidence,
            trial=trial,
            subject=stop_subject(experiment),
        )

    @staticmethod
    def _fix() -> str:
        return (
            "Resume the sweep with `Tuner.restore(path, trainable, resume_unfinished=True)`; "
            "unfinished trials continue from their last checkpoint. Find out why the driver "
            "stopped (its log; `dmesg` on the head node for the OOM killer; the job "
            "scheduler's time limit or preemption) before re-running it."
        )
