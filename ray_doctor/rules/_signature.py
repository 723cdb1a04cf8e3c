"""Rules that recognise a failure by its text: a table of signatures per rule.

A `SignatureRule` looks at the failures that ended a trial or a run (the last `Failure # N`
of an errored trial, a driver's uncaught traceback, a Train V2 worker-group error) and, when
no failure carries its signature, at the log lines the scan kept. The first signature that
matches makes the finding; the rule turns the match into a message and a fix.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ray_doctor._literals import LineTemplates, line_starts, lines_that_may_match, may_match, screen
from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, Experiment, Failure, LogEvent, Trial, TrialStatus
from ray_doctor.rules._base import (
    Precedence,
    Rule,
    failure_evidence,
    failure_subject,
    stop_subject,
    trial_subject,
)
from ray_doctor.rules._events import any_event_line, event_text, matching_lines

MAX_EVENT_EVIDENCE = 5


class LazyPattern:
    """A regex compiled when first searched with. A run holds ~210 signature patterns and
    searches with few: the rest are ruled out by the literals they need (`_literals`), read
    from the pattern's text. Compiling them all cost 16 ms of every start-up."""

    __slots__ = ("_compiled", "flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def search(self, string: str, *bounds: int) -> re.Match[str] | None:
        return self.compiled().search(string, *bounds)

    def match(self, string: str, *bounds: int) -> re.Match[str] | None:
        return self.compiled().match(string, *bounds)

    def __getattr__(self, name: str) -> Any:  # finditer, sub, groupindex, ...
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"


@dataclass(frozen=True)
class Signature:
    """One way the cause shows up in text, derived from the code that prints it.

    `label` says which wording it is; `emitter` names the program and source that prints it
    and `versions` the releases that do, so the table can be audited against the source and a
    new wording is one row with its origin. `example` is the text as the emitter prints it:
    the rule docs list it and a test proves each pattern matches its own example and that the
    scan keeps the line."""

    label: str
    pattern: re.Pattern[str]  # a LazyPattern from `wording` and `signatures`: the same calls
    emitter: str = ""
    versions: str = ""
    example: str = ""


def wording(
    label: str, regex: str, emitter: str, versions: str, example: str, flags: int = 0
) -> Signature:
    return Signature(label, _lazy(regex, flags), emitter, versions, example)


def _lazy(regex: str, flags: int) -> re.Pattern[str]:
    return LazyPattern(regex, flags)  # type: ignore[return-value]  # it answers the same calls


def signatures(*rows: Signature | tuple[str, str], flags: int = 0) -> tuple[Signature, ...]:
    """A rule's table: `wording(...)` rows, or bare (label, regex) pairs for internal
    patterns that are not a message of their own."""
    return tuple(
        row if isinstance(row, Signature) else Signature(row[0], _lazy(row[1], flags))
        for row in rows
    )


@dataclass(frozen=True)
class Hit:
    """A signature found in a failure block or a log line."""

    signature: Signature
    match: re.Match[str]
    evidence: Evidence
    failure: Failure | None = None
    trial: Trial | None = None
    event: LogEvent | None = None
    text: str | None = None  # for log hits: the lines around them, for details


def ended_trials(experiment: Experiment) -> Iterator[Trial]:
    """The trials a failure ended: errored, or of unknown status, with a failure recorded."""
    return (
        trial
        for trial in experiment.trials
        if trial.failures and trial.status in (TrialStatus.ERROR, TrialStatus.UNKNOWN)
    )


def ended_by(experiment: Experiment) -> Iterator[tuple[Trial | None, Failure, str]]:
    """(trial, failure, subject) for each failure that ended something.

    An errored trial is explained by its last failure; earlier ones were retried. A run-level
    failure (the driver's own traceback, a failure in a log) is explained as it stands.
    """
    for trial in ended_trials(experiment):
        yield trial, trial.failures[-1], trial_subject(experiment, trial)
    for index, failure in enumerate(experiment.failures):
        yield None, failure, failure_subject(experiment, index)


def search(sigs: Sequence[Signature], failure: Failure) -> Hit | None:
    """The first of `sigs` found in the failure's block."""
    for index in screen(sigs, failure.joined, _pattern):
        signature = sigs[index]
        found = failure.screened_evidence_for(signature.pattern)
        if found:
            evidence, match = found
            return Hit(signature, match, evidence, failure)
    return None


def _pattern(signature: Signature) -> re.Pattern[str]:
    return signature.pattern


def any_line(pattern: re.Pattern[str], texts: list[str], joined: str | None = None) -> bool:
    """Whether `pattern` matches within one of `texts`. A literal the pattern needs, absent
    from all of them at once (`joined`: the texts joined by newlines), settles it first."""
    joined = "\n".join(texts) if joined is None else joined
    if not may_match(pattern, joined):
        return False
    if len(texts) < MANY_LINES:
        return any(pattern.search(text) for text in texts)
    found = lines_that_may_match(pattern, joined, line_starts(texts))
    return any(pattern.search(texts[i]) for i in (range(len(texts)) if found is None else found))


MANY_LINES = 64  # from here on, finding the candidate lines in one sweep beats a test per line


def live(
    sigs: Iterable[Signature], joined: str, templates: LineTemplates | None = None
) -> list[Signature]:
    """The signatures that may match somewhere in `joined` (whose lines `templates` stands
    for, when given), in their order."""
    return [sig for sig in sigs if may_match(sig.pattern, joined, templates)]


def search_events(sigs: Iterable[Signature], events: Iterable[LogEvent]) -> list[Hit]:
    """The first of `sigs` (in their order) each event's line matches, for every line that
    matches one. Each signature is tried only on the lines that hold a literal it needs
    (`lines_that_may_match`): 38,000 kept log lines x 125 signatures were 8 M regex searches,
    then 340,000 per-line prefilter calls."""
    events = events if isinstance(events, list) else list(events)
    text = event_text(events)
    table = live(sigs, text.joined, text.templates)
    if not table:
        return []
    every_line = range(len(events))
    candidates = []  # per signature: the line indices it may match, ascending
    for signature in table:
        found = lines_that_may_match(
            signature.pattern, text.joined, text.starts, text.lowered, text.templates
        )
        candidates.append(every_line if found is None else found)
    first: dict[int, Hit] = {}  # line index -> its hit (the earliest signature wins)
    for signature, indices in zip(table, candidates, strict=True):
        for index in indices:
            if index in first:
                continue
            match = signature.pattern.search(text.lines[index])
            if match:
                first[index] = Hit(signature, match, events[index].source, event=events[index])
    return [first[index] for index in sorted(first)]


class SignatureRule(Rule):
    """A rule whose evidence is text. Subclasses set `signatures` and write `explain`."""

    signatures: ClassVar[tuple[Signature, ...]] = ()
    specificity = Precedence.CODE_OR_DATA
    # Also fire on log lines when no failure carries the signature (e.g. raylet.out kills).
    use_events: ClassVar[bool] = True
    # Where log text names the process it is about (e.g. the worker a kill chose): matched
    # against each trial's last reported pid to say which trial it was.
    victim_pid: ClassVar[re.Pattern[str] | None] = None

    @classmethod
    def wordings(cls) -> tuple[Signature, ...]:
        """Every wording the rule recognises (its docs list them)."""
        return cls.signatures

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        """(message, fix) for a hit; `hit.trial` / `hit.failure` say what it is about."""
        raise NotImplementedError

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        """True when a more telling rule owns this failure (see the OOM family)."""
        return False

    def search_failure(self, failure: Failure) -> Hit | None:
        """The failure's first signature; a rule may also know the failure by its frames."""
        return search(self.signatures, failure)

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        fired: list[Finding] = []
        for trial, failure, subject in ended_by(experiment):
            hit = self.search_failure(failure)
            if hit is None or self.excluded(experiment, failure):
                continue
            hit = Hit(hit.signature, hit.match, hit.evidence, failure, trial)
            message, fix = self.explain(experiment, hit)
            evidence = [hit.evidence, *failure_evidence(failure)]
            fired.append(
                self.finding(
                    experiment, message, fix, _unique(evidence), trial=trial, subject=subject
                )
            )
        if self.use_events and not self.excluded(experiment, None):
            hits = search_events(self.signatures, experiment.events)
            if hits and fired:
                # The logs back up what the failures say: add their lines as evidence.
                fired[0].evidence = _unique(
                    fired[0].evidence + [h.evidence for h in hits[:MAX_EVENT_EVIDENCE]]
                )
            elif hits:
                fired.append(self._from_events(experiment, hits))
        yield from fired

    def _victim(self, experiment: Experiment, text: str) -> Trial | None:
        if self.victim_pid is None:
            return None
        pids = {int(g) for m in self.victim_pid.finditer(text) for g in m.groups() if g}
        matches = [t for t in experiment.trials if t.last_result.get("pid") in pids]
        return matches[0] if len(matches) == 1 else None

    def _from_events(self, experiment: Experiment, hits: list[Hit]) -> Finding:
        context = _nearby(experiment.events, hits)
        trial = _trial_of(experiment, hits) or self._victim(experiment, context)
        hit = Hit(hits[0].signature, hits[0].match, hits[0].evidence, None, trial, text=context)
        message, fix = self.explain(experiment, hit)
        severity = self.severity
        if _all_finished(experiment) and not experiment.failures:
            # It happened, but every trial finished: worth knowing, not a failure.
            severity = Severity.WARNING if self.severity == Severity.ERROR else self.severity
            message += " Every trial still finished (Ray retried or the work was elsewhere)."
        # Log lines that explain why the run stopped lead the stop (trial-incomplete folds in),
        # even when they also name the trial they hit.
        stopped = experiment.failures or any(t.unfinished for t in experiment.trials)
        subject = (
            trial_subject(experiment, trial) if trial and not stopped else stop_subject(experiment)
        )
        if severity != self.severity:
            subject = None  # a survived event does not explain any failure
        return self.finding(
            experiment,
            message,
            fix,
            [h.evidence for h in hits[:MAX_EVENT_EVIDENCE]],
            trial=trial,
            subject=subject,
            severity=severity,
        )


# Tune's own words in a log that a trial finished, or that one did not.
FINISHED_EVENTS = frozenset({"trial-completed"})
UNFINISHED_EVENTS = frozenset({"trial-errored", "trial-task-failed", "trials-incomplete"})


def _all_finished(experiment: Experiment) -> bool:
    """Every trial finished: by their status, or, for a log that is all there is, by Tune's
    lines (some trial completed, none errored or was left unfinished)."""
    if experiment.trials:
        return all(
            t.status == TrialStatus.TERMINATED and not t.never_started for t in experiment.trials
        )
    kinds = {event.kind for event in experiment.events}
    return bool(kinds & FINISHED_EVENTS) and not kinds & UNFINISHED_EVENTS


def _trial_of(experiment: Experiment, hits: list[Hit]) -> Trial | None:
    """The trial the log lines are about, when they all name the same one."""
    keys = {h.event.trial for h in hits if h.event is not None and h.event.trial}
    if len(keys) == 1:
        return experiment.trial(keys.pop())
    return None


def _nearby(events: list[LogEvent], hits: list[Hit], span: int = 40) -> str:
    """The kept log lines within `span` lines of any hit, in order: details often sit on the
    line after the one that matched (NCCL's "last completed work" follows its timeout)."""
    anchors: dict[str, list[int]] = {}
    for hit in hits:
        if hit.evidence.line:
            anchors.setdefault(hit.evidence.path, []).append(hit.evidence.line)
    for numbers in anchors.values():
        numbers.sort()

    def near(event: LogEvent) -> bool:
        numbers = anchors.get(event.source.path)
        line = event.source.line
        if not numbers or not line:
            return False
        first = bisect_left(numbers, line - span)  # the first anchor at or after line - span
        return first < len(numbers) and numbers[first] <= line + span

    lines = [e.line for e in events if near(e)]
    kept = set(lines)
    lines += [h.event.line for h in hits if h.event is not None and h.event.line not in kept]
    return "\n".join(lines)


def _unique(evidence: list[Evidence]) -> list[Evidence]:
    seen: set[tuple[str, int | None]] = set()
    out = []
    for item in evidence:
        key = (item.path, item.line)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def texts_of(experiment: Experiment, failure: Failure | None) -> list[str]:
    """A failure's lines (or, for log evidence, those of the run's own failures) and the log
    lines the scan kept: where other evidence can stand."""
    failures = [failure] if failure is not None else experiment.failures
    texts = [line for f in failures for _, line in f.lines()]
    return texts + [event.line for event in experiment.events]


def lines_matching(
    pattern: re.Pattern[str], experiment: Experiment, failure: Failure | None
) -> Iterator[tuple[int, str, re.Match[str]]]:
    """The lines of `texts_of` that `pattern` matches, in its order: (the line's place in
    `texts_of`, the line, the match). The kept log lines are searched through their shared
    text (`matching_lines`), not one by one."""
    failures = [failure] if failure is not None else experiment.failures
    texts = [line for f in failures for _, line in f.lines()]
    for index, text in enumerate(texts):
        match = pattern.search(text)
        if match:
            yield index, text, match
    for index, text, match in matching_lines(pattern, experiment.events):
        yield len(texts) + index, text, match


def mentions(experiment: Experiment, failure: Failure | None, sigs: Iterable[Signature]) -> bool:
    """Whether any of `sigs` appears in the failure or the kept log lines (`texts_of`)."""
    failures = [failure] if failure is not None else experiment.failures
    texts = [line for f in failures for _, line in f.lines()]
    joined = "\n".join(texts)
    return any(
        any_line(sig.pattern, texts, joined) or any_event_line(sig.pattern, experiment.events)
        for sig in sigs
    )


def hit_text(hit: Hit) -> str:
    """The whole failure block of a hit, or its log line."""
    if hit.failure is not None:
        return hit.failure.text
    return hit.text or hit.evidence.excerpt


def first_match(hit: Hit, *patterns: re.Pattern[str]) -> re.Match[str] | None:
    text = hit_text(hit)
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return match
    return None


def first_group(hit: Hit, *patterns: re.Pattern[str]) -> str | None:
    """The first non-empty capture of the first pattern found in the hit's text."""
    match = first_match(hit, *patterns)
    if match is None:
        return None
    return next((g for g in match.groups() if g), None)
