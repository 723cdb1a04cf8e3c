"""The rule contract: a stable id, a severity, a doc with fixed sections, and `check()`."""

from __future__ import annotations

import inspect
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, Experiment, Failure, Layout, Trial
from ray_doctor.rules._events import matching_events

# Relative to the repository root; `ray-doctor explain RULE` shows the same text offline.
DOCS_BASE = "docs/rules"
DOC_SECTIONS = ("Symptom", "Likely cause", "Evidence it uses", "Fix", "References")
_SECTION = re.compile(rf"^({'|'.join(DOC_SECTIONS)}):\s*$")


@dataclass(frozen=True)
class RuleDoc:
    summary: str
    sections: dict[str, str]


def parse_doc(text: str) -> RuleDoc:
    lines = inspect.cleandoc(text or "").splitlines()
    summary_lines: list[str] = []
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        match = _SECTION.match(line)
        if match:
            current = sections.setdefault(match[1], [])
            continue
        if current is None:
            summary_lines.append(line)
        else:
            current.append(line[4:] if line.startswith("    ") else line)
    return RuleDoc(
        summary=" ".join(line.strip() for line in summary_lines if line.strip()),
        sections={k: "\n".join(v).strip() for k, v in sections.items()},
    )


class Precedence:
    """Cause before symptom. A port in use makes the rendezvous time out; an OOM kill makes the
    other ranks' collective time out and Tune say "Trials did not complete"; a full disk
    truncates the checkpoint that later fails to load. The lower level folds under the higher."""

    INCOMPLETE = 0  # trials did not complete: says that, not why
    ERROR = 1  # an error reported as it stands (unknown cause)
    RETRIES = 2  # how often it failed
    TRANSPORT = 3  # a communication library failed (NCCL): often the echo of another failure
    HANG = 4  # a collective or rendezvous timed out: some other rank or process is the cause
    CODE_OR_DATA = 5  # the program or its files are wrong (state dict, device, checkpoint, NaN)
    ENVIRONMENT = 6  # the machine or cluster: memory, disk, port, storage, modules, resources
    # Above them: collective-desync, which names the rank that broke a collective and how it
    # died (a kill notice of that rank included).


class Rule(ABC):
    """Subclasses set the class attributes and write their doc in the fixed sections."""

    id: ClassVar[str]
    title: ClassVar[str]
    severity: ClassVar[Severity]
    # Higher leads when several rules explain one failure, and orders the headlines: a cause
    # comes before the symptoms it produced (see `Precedence`).
    specificity: ClassVar[int] = Precedence.INCOMPLETE
    # A bundled fixture that shows the rule firing; docs and tests run it.
    example: ClassVar[str | None] = None
    example_args: ClassVar[tuple[str, ...]] = ()  # extra command-line arguments for it
    example_note: ClassVar[str] = ""  # why there is no bundled example, when there is none
    # Cross-trial rules read the other rules' (folded) findings: see `check_findings`.
    needs_findings: ClassVar[bool] = False
    # The commands whose reports use this id: inspect runs `check`; verify-checkpoint turns
    # its own problems into findings with the rule's title, severity and `verify_fix`.
    commands: ClassVar[tuple[str, ...]] = ("inspect",)
    verify_fix: ClassVar[str] = ""

    @classmethod
    def doc(cls) -> RuleDoc:
        return parse_doc(cls.__doc__ or "")

    @classmethod
    def docs_url(cls) -> str:
        return f"{DOCS_BASE}/{cls.id}.md"

    @classmethod
    def make_finding(
        cls,
        message: str,
        evidence: list[Evidence],
        fix: str,
        experiment: str | None = None,
        trial_id: str | None = None,
        severity: Severity | None = None,
    ) -> Finding:
        """A finding of this rule made outside `check` (verify-checkpoint, smoke)."""
        return Finding(
            rule=cls.id,
            severity=severity or cls.severity,
            title=cls.title,
            message=message,
            fix=fix,
            experiment=experiment,
            trial_id=trial_id,
            evidence=[e for e in evidence if e is not None],
            docs=cls.docs_url(),
        )

    @abstractmethod
    def check(self, experiment: Experiment) -> Iterator[Finding]:
        """Yield findings; read only the model."""

    def check_findings(self, experiment: Experiment, findings: list[Finding]) -> Iterator[Finding]:
        """For `needs_findings` rules: runs after the others, with their findings."""
        return iter(())

    def finding(
        self,
        experiment: Experiment,
        message: str,
        fix: str,
        evidence: list[Evidence],
        trial: Trial | None = None,
        subject: str | None = None,
        severity: Severity | None = None,
    ) -> Finding:
        return Finding(
            rule=self.id,
            severity=severity or self.severity,
            title=self.title,
            message=message,
            fix=fix,
            experiment=experiment.name,
            trial_id=trial.trial_id if trial else None,
            evidence=[e for e in evidence if e is not None],
            docs=self.docs_url(),
            subject=subject or (trial_subject(experiment, trial) if trial else None),
            specificity=self.specificity,
        )


TIME_BUDGET = re.compile(r"Reached timeout of [\d.]+ seconds|time_budget_s|TimeoutStopper")


def time_budget(experiment: Experiment) -> Evidence | None:
    """What says a time budget ended the run: the driver's line, or the stopper the
    experiment state records (TuneConfig(time_budget_s=...) becomes a TimeoutStopper)."""
    for event, _ in matching_events(TIME_BUDGET, experiment.events):
        return event.source
    if "TimeoutStopper" in str(experiment.runner.get("_stopper_classes", "")):
        where = f"{experiment.path}/{experiment.state_file}" if experiment.state_file else ""
        return Evidence(where, None, "runner_data._stopper: TimeoutStopper (a time budget)")
    return None


def own_stop_all(experiment: Experiment) -> Evidence | None:
    """The experiment state records a stopper of the user's own with a `stop_all`, which ends
    every trial, started or not, when it returns True."""
    if "custom stop_all" not in str(experiment.runner.get("_stopper_classes", "")):
        return None
    where = f"{experiment.path}/{experiment.state_file}" if experiment.state_file else ""
    return Evidence(where, None, "runner_data._stopper: a Stopper class of its own with stop_all")


def trial_subject(experiment: Experiment, trial: Trial) -> str:
    return f"trial:{experiment.path}:{trial.trial_id}"


def failure_subject(experiment: Experiment, index: int) -> str:
    return f"run:{experiment.path}:{index}"


def stop_subject(experiment: Experiment) -> str:
    """What log-only evidence explains: the driver's crash if there is one, else the stop
    that left trials unfinished (trial-incomplete uses the same subject, so it folds)."""
    if experiment.failures:
        return failure_subject(experiment, len(experiment.failures) - 1)
    return f"incomplete:{experiment.path}"


def failure_evidence(failure: Failure) -> list[Evidence]:
    """The lines that show a failure: its header, its exception line, the user's frame."""
    evidence = [failure.source, failure.exc_line]
    frame = failure.user_frame
    if frame is not None and failure.exc_line is not None:
        excerpt = f"{frame.function}: {frame.code}" if frame.code else frame.function
        evidence.append(Evidence(frame.file, frame.line, excerpt))
    seen: set[tuple[str, int | None]] = set()
    unique = []
    for item in evidence:
        if item is not None and (item.path, item.line) not in seen:
            seen.add((item.path, item.line))
            unique.append(item)
    return unique


def subject_name(experiment: Experiment, trial: Trial | None) -> str:
    """How a finding names what failed: a trial, a Train run, or the run a log came from."""
    if trial is None:
        return "The run"
    if experiment.layout == Layout.TRAIN_V2:
        return f"Train run {trial.trial_id}"
    if experiment.layout == Layout.TRAIN_V1:
        return f"Train run {trial.name}"
    return f"Trial {trial.trial_id}"


def resume_hint(experiment: Experiment, errored: bool = True) -> str:
    """The layout's own way to continue a failed or interrupted run from its checkpoints."""
    flag = "resume_errored=True" if errored else "resume_unfinished=True"
    if experiment.layout == Layout.TRAIN_V2:
        return (
            "re-run `trainer.fit()` with the same `RunConfig(name=..., storage_path=...)`; "
            "Train V2 resumes from the latest checkpoint in the run dir"
        )
    if experiment.layout == Layout.TRAIN_V1:
        return "resume with `TorchTrainer.restore(path)` (the Trainer class you used)"
    if experiment.layout == Layout.LOG:
        return "re-run it"
    return f"resume with `Tuner.restore(path, trainable, {flag})`"


def describe_ranks(failure: Failure) -> str:
    if not failure.ranks:
        return ""
    label = "rank" if len(failure.ranks) == 1 else "ranks"
    return f" on {label} {', '.join(map(str, failure.ranks))}"


def sentence(text: str) -> str:
    """`text` ended with a full stop unless it ends a sentence already (an exception message
    often does: "The actor died unexpectedly before finishing this task.")."""
    return text if text.rstrip().endswith((".", "!", "?")) else f"{text}."


def describe_frame(failure: Failure) -> str:
    frame = failure.user_frame
    if frame is None:
        return ""
    return f" (raised in {frame.function} at {frame.file}:{frame.line})"


class VerifyRule(Rule):
    """A rule id verify-checkpoint reports; its checks live in `ray_doctor.checkpoint`."""

    commands: ClassVar[tuple[str, ...]] = ("verify-checkpoint",)

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        return iter(())


class SmokeRule(Rule):
    """A rule id `ray-doctor smoke` reports; its checks run in `ray_doctor.smoke`."""

    commands: ClassVar[tuple[str, ...]] = ("smoke",)
    # The smoke command line whose real output is the rule's doc example (docs/generate.py).
    smoke_example: ClassVar[str | None] = None

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        return iter(())
