"""The log lines a scan kept (`Experiment.events`) as one searchable text: every rule asks the
same list (up to 2,000 kept lines per log file, tens of thousands with a session's logs) about
its patterns, so the text, its lowered form and its templates are made once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from ray_doctor._literals import (
    LineTemplates,
    line_starts,
    line_templates,
    lines_that_may_match,
    may_match,
)
from ray_doctor.model import LogEvent


@dataclass
class EventText:
    """An events list's lines, joined by newlines, where each starts in the joined text, and
    the joined text lowered (made on first use)."""

    lines: list[str]
    joined: str
    starts: list[int]
    _lowered: str | None = None
    _templates: LineTemplates | None = None

    @property
    def lowered(self) -> str:
        if self._lowered is None:
            self._lowered = self.joined.lower()
        return self._lowered

    @property
    def templates(self) -> LineTemplates:
        """The lines as their distinct templates: searched in their stead (`live`)."""
        if self._templates is None:
            self._templates = line_templates(self.lines)
        return self._templates


# The last events list's text: every rule asks the same list (up to 2,000 kept lines per log
# file, tens of thousands with a session's logs) about its signatures.
_EVENT_TEXT: list = [None, -1, None]


def event_text(events: list[LogEvent]) -> EventText:
    cached, length, text = _EVENT_TEXT
    if cached is not events or length != len(events):
        lines = [event.line for event in events]
        text = EventText(lines, "\n".join(lines), line_starts(lines))
        _EVENT_TEXT[:] = [events, len(events), text]
    return text


def event_lines(events: list[LogEvent]) -> tuple[list[str], str]:
    """Each event's line, and all of them joined by newlines (for `may_match`)."""
    text = event_text(events)
    return text.lines, text.joined


def any_event_line(pattern: re.Pattern[str], events: list[LogEvent]) -> bool:
    """`any_line` over the kept log lines (their text and templates made once for all rules)."""
    return next(matching_lines(pattern, events), None) is not None


def matching_events(
    pattern: re.Pattern[str], events: list[LogEvent]
) -> Iterator[tuple[LogEvent, re.Match[str]]]:
    """The events whose line `pattern` matches, in their order, with the match; only the
    lines holding what the pattern needs are searched."""
    for index, _, match in matching_lines(pattern, events):
        yield events[index], match


def matching_lines(
    pattern: re.Pattern[str], events: list[LogEvent]
) -> Iterator[tuple[int, str, re.Match[str]]]:
    """`matching_events` as (the event's index, its line, the match)."""
    text = event_text(events)
    if not may_match(pattern, text.joined, text.templates):
        return
    found = lines_that_may_match(pattern, text.joined, text.starts, text.lowered, text.templates)
    lines = text.lines
    for index in range(len(lines)) if found is None else found:
        match = pattern.search(lines[index])
        if match:
            yield index, lines[index], match
