"""A log file past its event cap is read by passing over runs of lines that cannot open a
traceback (`scan/_logs.py`): it must find what feeding every line finds."""

from __future__ import annotations

from itertools import islice

from conftest import REPO

from ray_doctor.scan._linesource import LineSource
from ray_doctor.scan._logs import (
    MACHINE_OPENERS,
    MAX_EVENTS_PER_FILE,
    MAX_FAILURES_PER_FILE,
    PASTED_OPENERS,
    TAIL_BYTES,
    TAIL_EVENTS,
    TAIL_LINES,
    _TextLogParser,
    parse_json_log,
    parse_text_log,
)
from ray_doctor.scan._normalise import machine_lines, normalise_lines

NOISE = "[2026-11-22 06:31:39,836 W 14339 14339] (raylet) worker_pool.cc:1: a worker died"
PLAIN = "[2026-11-22 06:31:39,836 I 14339 14339] (raylet) main.cc:567: all is well"


def _every_line(lines: list[str], path: str, pasted: bool = False):
    parser = _TextLogParser(path)
    for line in (normalise_lines if pasted else machine_lines)(lines):
        parser.feed(line)
    return parser.finish()


def _summary(result, head_only: bool = False):
    """Failures and events; `head_only`: the events up to the cap, not the tail's."""
    failures = [
        (f.exc_type, f.message, f.source, f.exc_line, f.text, trial) for f, trial in result.failures
    ]
    kept = result.events[:MAX_EVENTS_PER_FILE] if head_only else result.events
    events = [(e.kind, e.source, e.trial, e.pid, e.text) for e in kept]
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


def _chunks(data: bytes, size: int):
    return (data[i : i + size] for i in range(0, len(data), size))


def _stored(lines: list[str], path: str, pasted: bool, chunk: int):
    """The file read as `read_log_file` reads it: raw chunks, jumps in the bytes."""
    data = "\n".join(lines).encode() + b"\n"
    source = LineSource(_chunks(data, chunk), PASTED_OPENERS if pasted else MACHINE_OPENERS)
    return parse_text_log(source, path, pasted=pasted), source


PASTED_TAIL = [
    "\x1b[31mTraceback (most recent call last):\x1b[0m",
    "  File &quot;train.py&quot;, line 3, in f",
    "\x1b[31mValueError: coloured\x1b[0m",
    PLAIN,
    '{"log": "Traceback (most recent call last):\\n  File \\"j.py\\", line 1, in g\\nKeyError: 7"}',
    PLAIN,
    "2026-11-22T06:31:39.836Z stdout F RuntimeError: behind a collector's prefix",
    PLAIN + "\r",
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "r.py", line 5, in step',
    "[rank1]: torch.distributed.DistBackendError: NCCL error",
    PLAIN,
    "ray.exceptions.RayTaskError(ValueError): wrapped",
    PLAIN,
    "\x1b[1m\x1b[31masyncio.exceptions.CancelledError: cancelled\x1b[0m",
    PLAIN,
    "StopIteration: done",
    PLAIN,
    "MyÜberError: a name with a non-ASCII letter",
    PLAIN,
    "Current usage: 0 / 7.47535 GB",  # a debug dump's line: a name, but not an exception's
]


def test_jumping_in_the_bytes_finds_what_feeding_every_line_finds():
    # Chunks of 997 bytes put needles, line ends and CRLFs across chunk boundaries.
    lines = [NOISE] * (MAX_EVENTS_PER_FILE + 10) + _tail() + [PLAIN] * 2000 + PASTED_TAIL
    for pasted in (False, True):
        padded = lines + [PLAIN] * 20_000 if pasted else lines  # past the head read whole
        stored, source = _stored(padded, "raylet.out", pasted, chunk=997)
        fed = parse_text_log(padded, "raylet.out", pasted=pasted)
        assert _summary(stored) == _summary(fed, head_only=True)  # `_stored` keeps no tail
        assert len(stored.failures) >= 9
        assert source.lines_passed_over > 5_000  # it did jump, over the runs of plain lines


def test_the_context_before_a_jump_still_names_the_failure():
    # The line saying which trial failed sits just before the traceback, past the event cap:
    # the traceback is that trial's failure, not a worker's background noise.
    lines = [NOISE] * (MAX_EVENTS_PER_FILE + 10) + [PLAIN] * 5000 + _tail()[-4:]
    stored, _ = _stored(lines, "driver.log", pasted=False, chunk=4096)
    claimed = [f for f, _ in stored.failures if f.exc_type == "OSError"]
    assert claimed and claimed[0].source.line == len(lines) - 2


def test_overlong_lines_are_cut_and_counted_once():
    long_line = "x" * 5000
    lines = [NOISE] * (MAX_EVENTS_PER_FILE + 10) + [long_line] * 3 + _tail()
    data = "\n".join(lines).encode() + b"\n"
    source = LineSource(_chunks(data, 1500), MACHINE_OPENERS, max_line=1024)
    stored = parse_text_log(source, "raylet.out", pasted=False)
    fed = parse_text_log([line[:1024] for line in lines], "raylet.out", pasted=False)
    assert _summary(stored) == _summary(fed)


def test_big_session_logs_read_in_processes_give_what_one_process_gives(monkeypatch):
    from pathlib import Path

    from ray_doctor.scan import _logs
    from ray_doctor.storage import open_storage

    logs = Path(__file__).resolve().parents[1] / "fixtures/tune_oom_memory_monitor/session_logs"
    storage, path = open_storage(str(logs))
    alone = _logs.read_session_logs(storage, path)
    monkeypatch.setattr(_logs, "PARALLEL_LOG_BYTES", 0)  # the fixture is small: force the pool
    monkeypatch.setattr(_logs, "can_fork", lambda: True)
    seen = []
    pooled = _logs.read_session_logs(storage, path, lambda done, total: seen.append(done))
    assert pooled.files == alone.files and len(pooled.files) > 3
    assert _summary(pooled) == _summary(alone)
    assert seen == list(range(1, len(pooled.files) + 1))


# Before the cap, a batch's lines that cannot matter are passed over too (`_feed_batch`): a line
# of every kind the parser keeps, among plain ones, with tracebacks in every form it opens.
EVERY_KIND = [
    "Trials did not complete: [train_fn_0003]",
    "Trial train_fn_0002 errored after 7 iterations at 2026-11-22 06:31:39.",
    "Trial task failed for trial train_fn_0001",
    "KeyboardInterrupt",
    "Training errored after 3 iterations",
    "- (ip=10.0.0.1, pid=4242) world_rank=1, local_rank=1, node_rank=0",
    "4242\t12.5\tpython train.py",
    "2026-11-22 06:31:39,836 ERROR tune_controller.py:1 -- Trial failed",
    "[2026-11-22 06:31:39,836 E 14339 14339] (raylet) node_manager.cc:1: bad",
    "[2026-11-22 06:31:39,836 F 14339 14339] (raylet) check failed",
    "the node is running low on memory, killing worker 17",  # a cause word only
    "ray-doctor: an earlier verdict about out of memory",  # ray-doctor's own line: dropped
    "(train_fn pid=77) Traceback (most recent call last):",
    '(train_fn pid=77)   File "train.py", line 3, in f',
    "(train_fn pid=77) ValueError: boom [repeated 3x across cluster]",
    "Traceback (most recent call last):",
    '  File "a.py", line 1, in f',
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "b.py", line 2, in g',
    "RuntimeError: chained",
    "  a message on a second line",
    '  File "pasted_frame.py", line 9, in h',
    "KeyError: 'k'",
    "OSError: standing alone",
    "\tindented after a plain line",
]


def test_before_the_cap_passing_over_lines_finds_what_feeding_every_line_finds():
    lines = []
    for repeat in range(30):  # below the event cap, across several batches of 4,096 lines
        lines += [PLAIN] * (97 + repeat) + EVERY_KIND + [NOISE.replace("died", "left")] * 50
    for pasted in (False, True):
        fast = parse_text_log(lines, "raylet.out", pasted=pasted)
        slow = _every_line(lines, "raylet.out", pasted=pasted)
        assert len(fast.events) < MAX_EVENTS_PER_FILE
        assert {e.kind for e in fast.events} >= {
            "trials-incomplete", "trial-errored", "trial-task-failed", "interrupted",
            "training-failed", "worker-rank", "memory-row", "error-line", "signal",
        }  # fmt: skip
        assert _summary(fast) == _summary(slow)


def test_real_error_texts_read_the_same_with_lines_passed_over():
    # The corpus: 340 outputs copied from public issue trackers, none written by us.
    cases = sorted((REPO / "tests" / "corpus" / "cases").rglob("*.txt"))
    assert len(cases) > 300
    for case in cases:
        lines = case.read_text(errors="replace").splitlines()
        fast = parse_text_log(lines, case.name, pasted=True)
        if fast.failures and fast.failures[0][0].source is None:
            continue  # read as an error.txt (its header): not the line parser
        assert _summary(fast) == _summary(_every_line(lines, case.name, pasted=True)), case


def _whole_lines_in_tail(data: bytes, tail: int, max_line: int) -> list[tuple[int, str]]:
    """What `LineSource.tail_lines` must give, worked out the plain way: the lines starting
    in the last `tail` bytes, numbered from the file's first line."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    found, at = [], 0
    for number, raw in enumerate(lines, start=1):
        if at >= len(data) - tail:
            found.append((number, raw[:max_line].decode("utf-8", "replace")))
        at += len(raw) + 1
    return found


def test_the_tail_is_numbered_as_the_file_is():
    lines = [f"line {i} " + "x" * (i * 37 % 300) for i in range(3000)]
    lines[2500] = "y" * 5000  # an overlong line inside the tail
    lines[2700] = "crlf\r"
    data = "\n".join(lines).encode()
    for ending in (b"", b"\n"):  # with and without the last line end
        for chunk in (997, 4096, 65536):
            for tail in (1, 1000, 60_000, 10**7):
                source = LineSource(_chunks(data + ending, chunk), MACHINE_OPENERS, 1024, tail=tail)
                list(islice(source, 100))  # a reader that stopped early
                expected = _whole_lines_in_tail(data + ending, tail, 1024)
                assert source.tail_lines() == expected, (chunk, tail, ending)


KILL = (
    "[2026-11-22 06:40:12,489 I 20144 20144] (raylet) node_manager.cc:3199: Killing 1 "
    "worker(s), kill details: Memory on the node (IP: 192.0.2.2, ID: 48d3) was 3.66GB used / "
    "23.54GB limit (0.155360)"
)


def test_a_cause_logged_at_the_end_of_a_long_log_is_kept():
    # Chatter that fills the event cap in its first lines, then plain lines, then the kill:
    # the run's end, where its death is logged.
    lines = [NOISE] * (MAX_EVENTS_PER_FILE + 10) + [PLAIN] * 30_000 + [KILL] + [PLAIN] * 50
    data = "\n".join(lines).encode() + b"\n"
    source = LineSource(_chunks(data, 4096), MACHINE_OPENERS, tail=TAIL_BYTES)
    stored = parse_text_log(source, "raylet.out", pasted=False)
    kills = [e for e in stored.events if e.line == KILL]
    assert [e.source.line for e in kills] == [len(lines) - 50]
    # The head is what it was; the tail adds what the cap left out, once.
    assert [e.source.line for e in stored.events[:MAX_EVENTS_PER_FILE]] == list(
        range(1, MAX_EVENTS_PER_FILE + 1)
    )
    assert len(stored.events) == MAX_EVENTS_PER_FILE + 1

    # A tail dense with events keeps its last TAIL_EVENTS, as feeding it every line finds them.
    noisy_end = [NOISE] * (MAX_EVENTS_PER_FILE + 10) + [PLAIN] * 100 + [NOISE, KILL] * 400
    data = "\n".join(noisy_end).encode() + b"\n"
    source = LineSource(_chunks(data, 997), MACHINE_OPENERS, tail=TAIL_BYTES)
    stored = parse_text_log(source, "raylet.out", pasted=False)
    parser = _TextLogParser("raylet.out", max_events=10**9)
    for line in machine_lines(noisy_end):
        parser.feed(line)
    every = parser.finish().events
    cap_line = every[MAX_EVENTS_PER_FILE - 1].source.line
    expected = [e for e in every if e.source.line > cap_line][-TAIL_EVENTS:]
    assert _summary(stored)[1][MAX_EVENTS_PER_FILE:] == [
        (e.kind, e.source, e.trial, e.pid, e.text) for e in expected
    ]
    assert stored.events[-1].line == KILL


def test_a_train_v2_json_log_keeps_its_last_events_past_the_cap():
    train_logs = sorted(REPO.glob("fixtures/*/session_logs/train/*.log"))
    records = [line for path in train_logs for line in path.read_text().splitlines()]
    error = next(r for r in records if '"levelname": "ERROR"' in r)
    routine = next(r for r in records if "loss=" in r and "Error" not in r)
    lines = [error] * (MAX_EVENTS_PER_FILE + 500) + [routine] * 100 + [error]
    result = parse_json_log(lines, "ray-train-app-worker.log")
    numbers = [e.source.line for e in result.events]
    assert numbers[:MAX_EVENTS_PER_FILE] == list(range(1, MAX_EVENTS_PER_FILE + 1))
    # Past the cap: the last events, ending with the run's last error.
    assert numbers[MAX_EVENTS_PER_FILE:] == [
        *range(MAX_EVENTS_PER_FILE + 500 - TAIL_EVENTS + 2, MAX_EVENTS_PER_FILE + 501),
        len(lines),
    ]


def test_text_that_comes_as_lines_keeps_its_tail_too():
    # Standard input (`kubectl logs ... | ray-doctor inspect -`): no bytes to go back to, so the
    # last lines past the cap are kept as they go by.
    lines = [NOISE] * (MAX_EVENTS_PER_FILE + 10) + [PLAIN] * 30_000 + [KILL] + [PLAIN] * 50
    fed = parse_text_log(iter(lines), "stdin", pasted=True)
    assert [e.source.line for e in fed.events if e.line == KILL] == [len(lines) - 50]
    # Only the last TAIL_LINES lines are looked at again: a kill before them is not.
    lines = [NOISE] * (MAX_EVENTS_PER_FILE + 10) + [KILL] + [PLAIN] * (TAIL_LINES + 10)
    fed = parse_text_log(iter(lines), "stdin", pasted=True)
    assert not [e for e in fed.events if e.line == KILL]
