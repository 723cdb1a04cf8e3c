"""Plain logs: a driver's output, an error.txt, a worker .err, a Ray session logs dir, stdin.

Logs are streamed line by line. Tracebacks become `Failure`s; lines that say something about
how the run went (a trial errored, trials did not complete, an interrupt, an error-level
record) become `LogEvent`s. Everything keeps its file and line number for evidence.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ray_doctor.model import Evidence, Failure, LogEvent, ScanError
from ray_doctor.scan._errorfile import HEADER, parse_error_lines
from ray_doctor.scan._traceback import CHAIN_MARKERS, is_exception_line, parse_failure, strip_ansi
from ray_doctor.storage import Entry, Storage, StorageError

# Ray prefixes lines a worker printed with `(name pid=123, ip=10.0.0.1)`.
WORKER_PREFIX = re.compile(r"^\((?P<actor>[^()]*?)\s*pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s?")
# An exception line standing alone must name a type with a message, e.g. `ValueError: bad`.
STANDALONE_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:\([\w.]+\))?: \S")
# Ray's log deduplication appends this to a line it has folded repeats of.
DEDUP_SUFFIX = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
RECORD_START = re.compile(
    r"^(\d{4}-\d{2}-\d{2}[ T_]\d{2}[:-]\d{2}|\[\d{4}-\d{2}-\d{2}|[IWEF]\d{4} |"
    r"[╭╰│├]|Trial status:|Current time:|View detailed results|== Status ==)"
)
MAX_TRACEBACK_LINES = 2000
MAX_MESSAGE_CONTINUATION = 60
MAX_EVENTS_PER_FILE = 500
MAX_FAILURES_PER_FILE = 50
MAX_EXCERPT = 300
MAX_LINE_TEXT = 2000


@dataclass(frozen=True)
class EventPattern:
    kind: str
    pattern: re.Pattern[str]


# What a line says about the run. First match wins; "error-line" is the catch-all.
EVENT_PATTERNS = (
    EventPattern("trials-incomplete", re.compile(r"Trials did not complete")),
    EventPattern(
        "trial-errored",
        re.compile(r"Trial (?P<trial>\S+) errored after (?P<iterations>\d+) iterations"),
    ),
    EventPattern("trial-task-failed", re.compile(r"Trial task failed for trial (?P<trial>\S+)")),
    EventPattern(
        "interrupted",
        re.compile(r"^KeyboardInterrupt|Received SIGINT|Stop signal received|SIGTERM received"),
    ),
    EventPattern("training-failed", re.compile(r"Training (errored after|failed due to)")),
    EventPattern(
        "error-line",
        re.compile(r"(^|\s)(ERROR|CRITICAL|FATAL)(\s|:|$)|^\[[\d\- :,]+ [EF] \d+ \d+\]"),
    ),
    # Lines that can explain a failure whatever their level: kills, exits, resources, I/O.
    # Rules decide what they mean; this only keeps them (bounded per file).
    EventPattern(
        "signal",
        re.compile(
            r"(?i)out of memory|low on memory|\boom\b|oom-kill|killed process|\bkill(ed|ing)\b|"
            r"selected to kill|"
            r"sigkill|exit(ed)? (with )?(code|status)|exit_type|timed out|timeout|"
            r"address already in use|eaddrinuse|errno:? ?98|no space left|enospc|errno:? ?28|"
            r"insufficient|cannot be scheduled|no available node types|"
            r"unable to set up cluster storage|no module named|\bnccl|watchdog|barrier|"
            r"rendezvous|not on the expected device|same device|central directory|"
            r"ran out of input|unpickling|state_dict|safetensor|not enough resources"
        ),
    ),
)
# worker-<worker id>-<job id>-<pid>.out|err and python-core-worker-<worker id>_<pid>.log
WORKER_LOG_PID = re.compile(
    r"^(?:worker-[0-9a-f]+-[0-9a-f]+-|python-core-worker-[0-9a-f]+_)(?P<pid>\d+)\."
)
PID_IN_LINE = re.compile(r"\bpid[=: ]+(?P<pid>\d+)")
TRIAL_IN_CONTEXT = re.compile(r"Trial task failed for trial (?P<trial>\S+)")
# A traceback printed by a worker is the failure only when the line before says so; others
# (a background thread dying, a retried call) are kept as events, never as the cause.
FAILURE_CONTEXT = ("Error in training function", "Trial task failed for trial")
BACKGROUND_CONTEXT = re.compile(r"^Exception in thread |^Exception ignored in")


@dataclass
class LogResult:
    """What one or more log files yielded."""

    failures: list[tuple[Failure, str | None]] = field(default_factory=list)  # (failure, trial)
    events: list[LogEvent] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    errors: list[ScanError] = field(default_factory=list)

    def extend(self, other: LogResult) -> None:
        self.failures += other.failures
        self.events += other.events
        self.files += other.files
        self.errors += other.errors


def _classify(line: str) -> tuple[str, str | None] | None:
    for event in EVENT_PATTERNS:
        match = event.pattern.search(line)
        if match:
            trial = match.groupdict().get("trial")
            return event.kind, trial.rstrip(".:,") if trial else None
    return None


class _TextLogParser:
    """Stream a text log; collect tracebacks and notable lines."""

    def __init__(self, path: str, pid: str | None = None) -> None:
        self.path = path
        self.file_pid = pid  # the process a per-worker log file belongs to
        self.result = LogResult(files=[path])
        self.context: deque[str] = deque(maxlen=4)
        self.block: list[tuple[int, str]] | None = None
        self.block_header = True  # the block starts with "Traceback (most recent call last)"
        self.block_context: list[str] = []
        self.block_pid: str | None = None
        self.after_exception = 0  # message lines allowed after an exception line
        self.pending_blank: tuple[int, str] | None = None

    def feed(self, lineno: int, raw: str) -> None:
        line = raw.rstrip("\r\n")
        # Both substitutions only where their text can be: a 200 MB session log has millions
        # of plain lines, and two regex passes each were a fifth of reading it.
        if "\x1b" in line:
            line = strip_ansi(line)
        if "[repeated " in line:
            line = DEDUP_SUFFIX.sub("", line)
        prefix = WORKER_PREFIX.match(line)
        pid = None  # set when the driver forwarded a worker's line
        if prefix:
            pid = prefix["pid"]
            line = line[prefix.end() :]
        if self.block is not None and self._continues(lineno, line):
            return
        if self.block is not None:
            self._close()
        if line.startswith("Traceback (most recent call last)"):
            self._open(lineno, line, pid, header=True)
        elif pid is None and STANDALONE_EXCEPTION.match(line) and is_exception_line(line):
            # An exception line with no traceback (a pasted error, a logged `repr`): a failure
            # of its own, with its message lines.
            self._open(lineno, line, pid, header=False)
            self.after_exception = MAX_MESSAGE_CONTINUATION
            self._event(lineno, line, pid)
        else:
            self._event(lineno, line, pid)
        if line.strip():
            self.context.append(line)

    def _open(self, lineno: int, line: str, pid: str | None, header: bool) -> None:
        self.block = [(lineno, line)]
        self.block_header = header
        self.block_context = list(self.context)
        self.block_pid = pid
        self.after_exception = 0

    def _continues(self, lineno: int, line: str) -> bool:
        assert self.block is not None
        if len(self.block) >= MAX_TRACEBACK_LINES:
            return False
        if not line.strip():
            # A blank line ends a traceback unless a chained one follows; decide on the next.
            if self.pending_blank is not None:
                return False
            self.pending_blank = (lineno, line)
            return True
        blank, self.pending_blank = self.pending_blank, None
        chained = line.startswith(("Traceback (", "[Rank ")) or line.startswith(CHAIN_MARKERS)
        # A single blank line ends a traceback, unless a chained one follows or it sits inside
        # a long exception message (Ray's OOM text has blank lines in it).
        if blank is not None and not chained and self.after_exception <= 0:
            return False
        if blank is not None:
            self.block.append(blank)
        if chained or line[0].isspace():
            self.block.append((lineno, line))
            return True
        if is_exception_line(line):
            self.block.append((lineno, line))
            self.after_exception = MAX_MESSAGE_CONTINUATION
            return True
        if self.after_exception > 0 and not RECORD_START.match(line):
            self.after_exception -= 1
            self.block.append((lineno, line))
            return True
        return False

    def _close(self) -> None:
        block, self.block, self.pending_blank = self.block, None, None
        if not block or len(self.result.failures) >= MAX_FAILURES_PER_FILE:
            return
        failure = parse_failure(block[1:] if self.block_header else block, self.path)
        failure.source = Evidence(self.path, block[0][0], block[0][1].strip())
        recent = self.block_context[-2:]
        background = any(BACKGROUND_CONTEXT.search(text) for text in recent[-1:])
        claimed = any(marker in text for text in recent for marker in FAILURE_CONTEXT)
        if background or (self.block_pid is not None and not claimed):
            if len(self.result.events) < MAX_EVENTS_PER_FILE:
                where = failure.exc_line or failure.source
                excerpt = f"{failure.summary}"[:MAX_EXCERPT]
                self.result.events.append(
                    LogEvent("traceback", Evidence(where.path, where.line, excerpt))
                )
            return
        trial = None
        for text in reversed(self.block_context):
            match = TRIAL_IN_CONTEXT.search(text)
            if match:
                trial = match["trial"].rstrip(".:,")
                break
        self.result.failures.append((failure, trial))

    def _event(self, lineno: int, line: str, pid: str | None = None) -> None:
        if len(self.result.events) >= MAX_EVENTS_PER_FILE or not line.strip():
            return
        found = _classify(line)
        if found:
            kind, trial = found
            if pid is None:
                in_line = PID_IN_LINE.search(line)
                pid = in_line["pid"] if in_line else self.file_pid
            evidence = Evidence(self.path, lineno, line)
            text = line.strip()[:MAX_LINE_TEXT]
            self.result.events.append(
                LogEvent(kind, evidence, trial, int(pid) if pid else None, text)
            )

    def finish(self) -> LogResult:
        if self.block is not None:
            self._close()
        return self.result


def parse_text_log(lines: Iterable[str], path: str, pid: str | None = None) -> LogResult:
    """A driver log, a worker .err/.out, or any text; error.txt content is recognised."""
    lines = iter(lines)
    head: list[str] = []
    for line in lines:
        head.append(line)
        if line.strip():
            break
    if head and HEADER.match(strip_ansi(head[-1].rstrip("\r\n"))):
        failures = parse_error_lines(_chain(head, lines), path)
        return LogResult(failures=[(f, None) for f in failures], files=[path])
    parser = _TextLogParser(path, pid)
    for lineno, line in enumerate(_chain(head, lines), start=1):
        parser.feed(lineno, line)
    return parser.finish()


def _chain(head: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from head
    yield from rest


def parse_json_log(lines: Iterable[str], path: str) -> LogResult:
    """Ray Train V2's logs/train/*.log: one JSON record per line."""
    result = LogResult(files=[path])
    for lineno, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        level = str(record.get("levelname", ""))
        message = str(record.get("message", ""))
        rank = record.get("world_rank")
        if len(result.events) < MAX_EVENTS_PER_FILE and message.strip():
            found = _classify(message)
            if level in ("ERROR", "CRITICAL") or found:
                kind = "error-line" if level in ("ERROR", "CRITICAL") else found[0]
                first = message.strip().splitlines()[0][:MAX_LINE_TEXT]
                result.events.append(LogEvent(kind, Evidence(path, lineno, message), text=first))
        exc_text = record.get("exc_text")
        if isinstance(exc_text, str) and exc_text.strip():
            block = [(lineno, text) for text in exc_text.splitlines()]
            failure = parse_failure(block, path)
            # One JSON record holds the whole traceback: its exception line is the excerpt.
            failure.source = failure.exc_line or Evidence(path, lineno, message or exc_text)
            if isinstance(rank, int) and rank not in failure.ranks:
                failure.ranks.append(rank)
            result.failures.append((failure, None))
    return result


def _decoded(storage: Storage, path: str) -> Iterator[str]:
    for raw in storage.iter_lines(path):
        yield raw.decode("utf-8", "replace")


def read_log_file(storage: Storage, path: str) -> LogResult:
    display = storage.display(path)
    try:
        if path.endswith(".log") and "/train/" in path.replace("\\", "/"):
            return parse_json_log(_decoded(storage, path), display)
        name = path.replace("\\", "/").rsplit("/", 1)[-1]
        owner = WORKER_LOG_PID.match(name)
        return parse_text_log(_decoded(storage, path), display, owner["pid"] if owner else None)
    except StorageError as exc:
        return LogResult(errors=[ScanError(exc.path, exc.reason)])


# Files of a Ray session logs dir worth reading, by name.
SESSION_LOG = re.compile(
    r"^(raylet\.(out|err)|gcs_server\.(out|err)|worker-.*\.(out|err)|"
    r"python-core-(worker|driver)-.*\.log|job-driver-.*\.log|ray-train-.*\.log|"
    r"runtime_env_setup-.*\.log|monitor\.(log|out|err))$"
)


def is_session_logs_dir(entries: list[Entry]) -> bool:
    return any(SESSION_LOG.match(e.name) for e in entries if e.is_file) and any(
        e.name.startswith(("raylet", "gcs_server", "python-core-")) for e in entries
    )


def read_session_logs(
    storage: Storage, path: str, progress: Callable[[int, int], None] | None = None
) -> LogResult:
    """A `/tmp/ray/session_*/logs` dir, including its `train/` subdir. `progress(done, total)`
    hears of each file read (a long session's logs run to gigabytes)."""
    result = LogResult()
    try:
        entries = storage.list_dir(path)
    except StorageError as exc:
        result.errors.append(ScanError(exc.path, exc.reason))
        return result
    for done, entry in enumerate(entries, start=1):
        if progress:
            progress(done, len(entries))
        if entry.is_dir and entry.name == "train":
            try:
                train_entries = storage.list_dir(entry.path)
            except StorageError as exc:
                result.errors.append(ScanError(exc.path, exc.reason))
                continue
            for item in train_entries:
                if item.is_file and item.name.endswith(".log"):
                    result.extend(read_log_file(storage, item.path))
        elif entry.is_file and SESSION_LOG.match(entry.name):
            result.extend(read_log_file(storage, entry.path))
    return result


def read_logs(
    storage: Storage, path: str, progress: Callable[[int, int], None] | None = None
) -> LogResult:
    """A log file or a dir of logs (a session logs dir or any dir of log files)."""
    try:
        entry = storage.stat(path)
    except StorageError as exc:
        return LogResult(errors=[ScanError(exc.path, exc.reason)])
    if entry is None:
        return LogResult(errors=[ScanError(storage.display(path), "no such file or directory")])
    if entry.is_dir:
        return read_session_logs(storage, path, progress)
    if not entry.is_file:
        return LogResult(errors=[ScanError(storage.display(path), "not a regular file")])
    return read_log_file(storage, path)
