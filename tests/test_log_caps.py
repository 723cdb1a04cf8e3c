"""A log file past its event cap is read by passing over runs of lines that cannot open a
traceback (`scan/_logs.py`): it must find what feeding every line finds."""

from __future__ import annotations

from ray_doctor.scan._logs import (
    MAX_EVENTS_PER_FILE,
    MAX_FAILURES_PER_FILE,
    _TextLogParser,
    parse_text_log,
)
from ray_doctor.scan._normalise import machine_lines

NOISE = "[2026-11-22 06:31:39,836 W 14339 14339] (raylet) worker_pool.cc:1: a worker died"
PLAIN = "[2026-11-22 06:31:39,836 I 14339 14339] (raylet) main.cc:567: all is well"


def _every_line(lines: list[str], path: str):
    parser = _TextLogParser(path)
    for line in machine_lines(lines):
        parser.feed(line)
    return parser.finish()


def _summary(result):
    failures = [
        (f.exc_type, f.message, f.source, f.exc_line, f.text, trial) for f, trial in result.failures
    ]
    events = [(e.kind, e.source, e.trial, e.pid, e.text) for e in result.events]
    return failures, events


def _tail() -> list[str]:
    return [
        PLAIN,
        "",
        "ray-doctor: an earlier verdict",
        "Trial task failed for trial train_fn_0001 [repeated 2x across cluster]",
        "(train_fn pid=123, ip=10.0.0.1) Traceback (most recent call last):",
        '(train_fn pid=123, ip=10.0.0.1)   File "train.py", line 3, in f',
        "(train_fn pid=123, ip=10.0.0.1)     raise ValueError('boom')",
        "(train_fn pid=123, ip=10.0.0.1) ValueError: boom",
        PLAIN,
        *[PLAIN] * 5000,
        "Exception in thread Thread-1:",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in run',
        "RuntimeError: background",
        "",
        *[PLAIN] * 3000,
        '  File "pasted.py", line 9, in g',
        "KeyError: 'k'",
        PLAIN,
        "ValueError: standing alone",
        "  with a second line",
        PLAIN,
        "(pid=9) Error in training function",
        "(pid=9) Traceback (most recent call last):",
        '(pid=9)   File "t.py", line 2, in h',
        "(pid=9) OSError: disk",
    ]


def test_past_the_event_cap_the_same_failures_are_found():
    lines = [NOISE] * (MAX_EVENTS_PER_FILE + 10) + _tail()
    fast = parse_text_log(lines, "raylet.out", pasted=False)
    slow = _every_line(lines, "raylet.out")
    assert len(fast.events) == MAX_EVENTS_PER_FILE
    assert len(fast.failures) >= 3
    assert _summary(fast) == _summary(slow)


def test_a_file_stops_once_both_caps_are_reached():
    block = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "ValueError: x",
        PLAIN,
    ]
    lines = [NOISE] * MAX_EVENTS_PER_FILE + block * (MAX_FAILURES_PER_FILE + 5) + _tail()
    fast = parse_text_log(lines, "raylet.out", pasted=False)
    slow = _every_line(lines, "raylet.out")
    assert len(fast.failures) == MAX_FAILURES_PER_FILE
    assert _summary(fast) == _summary(slow)
