"""trial-error: a trial (or a run) ended in an error that no more specific rule explains."""

from __future__ import annotations

from collections.abc import Iterator

from ray_doctor.model import Evidence, Experiment, Failure, LogEvent, Trial, TrialStatus
from ray_doctor.rules._base import (
    Finding,
    Precedence,
    Rule,
    Severity,
    describe_frame,
    describe_ranks,
    failure_evidence,
    failure_subject,
    resume_hint,
    sentence,
    subject_name,
)
from ray_doctor.rules._crash import KERNEL_FAULT, SELF_EXIT, crash_lines, worker_ranks
from ray_doctor.rules.trial_incomplete import says_trials_incomplete

# Ray's Trainable raises a bare NotImplementedError from these when a class Trainable lacks them
# and Tune needs to save or restore it (ray/tune/trainable/trainable.py).
CHECKPOINT_HOOKS = ("save_checkpoint", "load_checkpoint")


def _missing_hook(failure: Failure | None) -> str | None:
    if failure is None or failure.exc_type != "NotImplementedError" or not failure.frames:
        return None
    innermost = failure.frames[-1]
    in_ray = "ray/tune/" in innermost.file.replace("\\", "/")
    return innermost.function if in_ray and innermost.function in CHECKPOINT_HOOKS else None


def _fix(experiment: Experiment, failure: Failure | None, crashed: bool = False) -> str:
    resume = resume_hint(experiment)
    hook = _missing_hook(failure)
    if hook is not None:
        return (
            f"Tune called `{hook}` of a class Trainable that does not define it: it saves a "
            "trial to pause it (a scheduler, more trials than resources), for PBT, and for "
            "`CheckpointConfig(checkpoint_frequency=..., checkpoint_at_end=True)`. Implement "
            "`save_checkpoint(self, checkpoint_dir)` and `load_checkpoint(self, checkpoint_dir)`, "
            f"then {resume}."
        )
    if failure is not None and any(sig.pattern.search(failure.joined) for sig in KERNEL_FAULT):
        return (
            "CUDA reports a kernel's fault at a later CUDA call, so the traceback may point past "
            "the cause. Re-run the failing trial with `CUDA_LAUNCH_BLOCKING=1` (or on the CPU, "
            "where the same bug raises a plain IndexError) to get the line that faulted, and "
            "read the kernel's own `Assertion ... failed` line in the worker's stderr "
            "(`worker-*.err` in the session's logs dir). A device-side assert is most often an "
            "index out of range: a class label >= the number of classes, a token id >= the "
            f"vocabulary size, a negative index. Then {resume}."
        )
    if crashed:
        return (
            "A crash (a signal such as SIGSEGV or SIGABRT, most often from native code: a C/C++ "
            "or CUDA extension, a library built for another version of torch or numpy, a "
            "driver) kills the worker before Python can raise. Read the whole crash in the "
            "worker's log (`worker-*.err` in the session's logs dir), run the failing trial's "
            "code outside Ray with `python -X faulthandler` to see where it crashes, then "
            f"{resume}."
        )
    if failure is not None and failure.user_frame is not None:
        frame = failure.user_frame
        return (
            f"Fix the error raised in `{frame.function}` ({frame.file}:{frame.line}), then "
            f"{resume}."
        )
    return (
        "Read the error text in the evidence: it is Ray's or a library's own message, and "
        "ray-doctor knows no specific cause for it. Reproduce the failing trial on its own with "
        f"the same config to see the whole traceback; once fixed, {resume}."
    )


def _exit_fix(experiment: Experiment) -> str:
    return (
        "Find the exit in the training function or a library it calls (argparse exits with 2 on "
        "arguments it does not know: a `parse_args()` inside the trainable reads the worker's "
        "own command line) and raise an exception there instead, so Ray records it; then "
        f"{resume_hint(experiment)}."
    )


def _described(
    experiment: Experiment, failure: Failure, trial: Trial | None
) -> tuple[str, str, list[Evidence]]:
    """What the finding says after "... failed", its fix and evidence: the exception, and the
    crash that killed the worker when the exception is Ray's word for a worker's death."""
    frame = describe_frame(failure)
    hook = _missing_hook(failure)
    if hook is not None and not frame:
        frame = f" (raised by Ray's `Trainable.{hook}`: the class does not define it)"
    message = sentence(f"{describe_ranks(failure)} with {failure.summary}{frame}")
    evidence = failure_evidence(failure)
    crash = crash_lines(experiment, failure, trial)
    exited = SELF_EXIT.search(failure.joined) if not crash else None
    if exited is not None:
        message += (
            f' Its worker process exited by itself with code {exited[1]} (Ray: "{exited[0]}"), '
            "not by a signal: `sys.exit()`, `os._exit()` or a library calling `exit()`."
        )
        return message, _exit_fix(experiment), evidence
    if not crash:
        return message, _fix(experiment, failure), evidence
    first = crash[0]
    rank = worker_ranks(experiment).get(first.pid) if first.pid is not None else None
    whose = f"Rank {rank}'s" if rank is not None else "Its"
    pid = f" (pid {first.pid})" if first.pid is not None else ""
    message += f" {whose} worker process{pid} crashed: the log shows `{first.line.strip()[:200]}`."
    evidence += [event.source for event in crash[:3]]
    return message, _fix(experiment, failure, crashed=True), evidence


# Tune's own lines that a trial errored, when a log is all there is.
ERRORED_EVENTS = ("trial-errored", "trial-task-failed")


def _no_error_text(trial: Trial) -> str:
    if trial.error_file:  # there, but not readable (permissions, not a regular file)
        return f"its error file could not be read ({trial.error_file}: see the scan's errors)"
    return "no error text was found (no error.txt on storage and no traceback in the logs given)"


class TrialError(Rule):
    """A trial ended in ERROR and no rule for a specific cause explains why.

    Symptom:
        A trial's status is ERROR (Tune, Train V1), a Train V2 run failed, or a log holds a
        traceback; the error matches none of the known causes ray-doctor checks for.
    Likely cause:
        An exception raised by the training function or a library it calls. ray-doctor does
        not guess: it reports the exception type, its message and the frame of your code it
        was raised from, exactly as Ray recorded them.
    Evidence it uses:
        The `Failure # N` blocks of the trial's `error.txt` (the last one is the error that
        ended the trial), the trial status in the newest `experiment_state-*.json`, and
        tracebacks in the driver log or the logs given with `--logs`. A log that is all there
        is and holds Tune's word that a trial errored ("Trial X errored after N iterations",
        "Trial task failed for trial X") but no error text: the trials it names, their cause
        unknown, when nothing else was found and the log does not say later that the trial
        completed (a retry that worked). When the error is Ray's word for a worker that died
        without raising ("The actor died unexpectedly", "Worker unexpectedly exits"), the
        crash lines of that worker in the logs given (`*** SIGSEGV received`, `Fatal Python
        error`, `terminate called after throwing`; the same pid as error.txt's `pid:` or the
        same trial) are quoted: the crash is the cause, Ray's text only its report.
    Fix:
        Fix the code at the frame named in the finding. Then resume the failed trials with
        `Tuner.restore(path, trainable, resume_errored=True)` (continue from their last
        checkpoint) or `restart_errored=True` (start them over). If the error is transient,
        `FailureConfig(max_failures=N)` lets Tune retry it. For a crash: read the whole crash in
        the worker's `worker-*.err` log and run the trial's code outside Ray with
        `python -X faulthandler` to see the native stack. A bare `NotImplementedError` from
        Ray's `Trainable.save_checkpoint` / `load_checkpoint` means a class Trainable Tune had
        to save lacks them: implement both.
    References:
        - https://docs.ray.io/en/latest/tune/tutorials/tune-fault-tol.html
        - https://docs.ray.io/en/latest/tune/api/doc/ray.tune.Tuner.restore.html
    """

    id = "trial-error"
    title = "Trial failed"
    severity = Severity.ERROR
    specificity = Precedence.ERROR
    needs_findings = True  # the log-only case speaks only when nothing else was found
    example = "fixtures/tune_trial_error"

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        for trial in experiment.trials:
            if trial.status != TrialStatus.ERROR:
                continue
            failure = trial.failures[-1] if trial.failures else None
            who = subject_name(experiment, trial)
            if failure is None:
                message = f"{who} ended in ERROR, but {_no_error_text(trial)}."
                fix, evidence = _fix(experiment, failure), []
            else:
                detail, fix, evidence = _described(experiment, failure, trial)
                message = f"{who} failed{detail}"
            yield self.finding(experiment, message, fix, evidence, trial=trial)
        for index, failure in enumerate(experiment.failures):
            if says_trials_incomplete(failure):
                continue  # Tune's own summary of unfinished trials: trial-incomplete's words
            detail, fix, evidence = _described(experiment, failure, None)
            yield self.finding(
                experiment,
                f"The run failed{detail}",
                fix,
                evidence,
                subject=failure_subject(experiment, index),
            )

    def check_findings(self, experiment: Experiment, findings: list[Finding]) -> Iterator[Finding]:
        """A log with Tune's word that trials errored but not their error (a driver log cut
        short, a paste): the trials it names, unknown cause. Only when nothing else was found,
        the text holds no trial and no error of its own, and not for a trial the log later
        says completed (a retry that worked)."""
        if findings or experiment.trials or experiment.failures:
            return
        errored: dict[str, LogEvent] = {}
        for event in experiment.events:
            if event.kind in ERRORED_EVENTS and event.trial:
                errored.setdefault(event.trial, event)
            elif event.kind == "trial-completed":
                errored.pop(event.trial or "", None)
        fix = (
            "Run `ray-doctor inspect` on the experiment's dir (storage_path/name, where Ray "
            "wrote the trials' error.txt), or give the whole driver log: the error is there."
        )
        for trial, event in errored.items():
            message = (
                f"Trial {trial} errored, the log says; its error text is not in what was "
                "read (the trial's error.txt, or the rest of the driver's log, holds it)."
            )
            yield self.finding(experiment, message, fix, [event.source])
