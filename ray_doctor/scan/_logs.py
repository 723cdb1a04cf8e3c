"""Plain logs: a driver's output, an error.txt, a worker .err, a Ray session logs dir, stdin.

Logs are streamed line by line. Tracebacks become `Failure`s; lines that say something about
how the run went (a trial errored, trials did not complete, an interrupt, an error-level
record) become `LogEvent`s. Everything keeps its file and line number for evidence.
"""

from __future__ import annotations

import json
import re
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import BinaryIO

from ray_doctor._literals import (
    has_digit,
    line_starts,
    line_templates,
    lines_holding,
    lines_that_may_match,
    may_match,
    requirements,
)
from ray_doctor._pool import can_fork, cpus, forked_pool
from ray_doctor.model import TUNE_STATUS, Evidence, Failure, LogEvent, ScanError
from ray_doctor.scan._errorfile import HEADER, parse_error_text
from ray_doctor.scan._linesource import LineSource, Opener
from ray_doctor.scan._normalise import (
    INNER_CR,
    MAX_BUFFERED_LINES,
    REWRITE_MARKERS,
    TextLine,
    logical_text,
    machine_numbered,
    normalise_numbered,
)
from ray_doctor.scan._skim import MANY, ReaderView, Skimmer
from ray_doctor.scan._skim import Needles as SkimNeedles
from ray_doctor.scan._skim import needles as skim_needles
from ray_doctor.scan._traceback import (
    CHAIN_MARKERS,
    EXC_NAMES,
    EXC_SUFFIXES,
    FRAME,
    is_exception_line,
    parse_failure,
)
from ray_doctor.storage import Entry, LocalStorage, Storage, StorageError
from ray_doctor.storage._base import CHUNK_SIZE

# Ray prefixes lines a worker printed with `(name pid=123, ip=10.0.0.1)`.
WORKER_PREFIX = re.compile(r"^\((?P<actor>[^()]*?)\s*pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s?")
# An exception line standing alone must name a type with a message, e.g. `ValueError: bad`.
STANDALONE_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:\([\w.]+\))?: \S")
# A warning printed without its `file.py:N:` prefix ("UserWarning: TypedStorage is deprecated")
# is no failure, whatever follows it; in a traceback, a warning raised as an error still is.
STANDALONE_WARNING = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*Warning: ")
# A traceback's frame line without its indentation.
BARE_FRAME = re.compile(r'File "[^"\n]+", line \d+')
# Ray's log deduplication appends this to a line it has folded repeats of.
DEDUP_SUFFIX = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
RECORD_START = re.compile(
    r"^(\d{4}-\d{2}-\d{2}[ T_]\d{2}[:-]\d{2}|\[\d{4}-\d{2}-\d{2}|[IWEF]\d{4} |"
    r"[╭╰│├]|Trial status:|Current time:|View detailed results|== Status ==)"
)
MAX_TRACEBACK_LINES = 2000
MAX_MESSAGE_CONTINUATION = 60
MAX_EVENTS_PER_FILE = 2000
# A run's death is logged at the end, after hours of chatter that fill the event cap early: the
# last TAIL_BYTES of a stored log whose cap was reached are read for events too (the last
# TAIL_EVENTS of them kept). 256 KiB is thousands of lines: a raylet.out's last tens of minutes
# (its periodic state dumps are its bulk); each file's tail costs what its first 256 KiB did.
TAIL_BYTES = 256 * 1024
TAIL_LINES = 3000  # the same for text that comes as lines (standard input): ~85 bytes a line
TAIL_EVENTS = 200
MAX_ERROR_LINES_PER_FILE = 500  # plain ERROR records: enough to see them, not to crowd out causes
MAX_FAILURES_PER_FILE = 50
MAX_EXCERPT = 300
HOT_BATCH = 4096  # lines looked through for cause words at once
MAX_LINE_TEXT = 2000
# ray-doctor's own callbacks print their verdict into the driver's output with this prefix; a
# log reader skips those lines, so a diagnosis never quotes an earlier one as its evidence.
OWN_LINE_PREFIX = "ray-doctor: "


# Words of every cause a rule knows (memory, kills, crashes, ports, disks, storage, modules,
# resources, collectives, checkpoints, non-finite values), lowercase literals: a line holding
# none of them cannot be a cause's evidence. They are looked for in a whole batch of lines at
# once with str.find, which is fast; one case-blind regex of a hundred alternatives per line was
# the slowest part of reading a 100 MB raylet.out. tests/rules/test_wordings.py checks that
# every wording of every rule is kept.
CAUSE_ANCHORS = (
    # memory
    "out of memory",
    "low on memory",
    "oom-kill",
    "oom_kill",
    "oomkilled",
    "out_of_memory",
    "outofmemory",
    "memory pressure",
    "memory usage threshold",
    "memory limit",
    "memory on the node",
    "heap memory",
    "resource_exhausted",
    "resourceexhausted",  # TensorFlow's ResourceExhaustedError
    "that was not possible",  # the TPU runtime's "Attempting to allocate ... That was not ..."
    "memory space hbm",
    "allocating device buffer",
    "killed by yarn",
    "all available ram",
    "alloc_failed",
    "cannot allocate memory",
    "memoryallocation",
    "no available memory",
    "memory consumers",
    "memory used",
    "low on resource",
    "ephemeral",
    # kills, exits, crashes
    "kill",
    "已杀死",  # bash's "Killed" on a zh_CN locale
    "sigkill",
    "signals.sig",
    "signal ",
    "exit code",
    "exitcode",
    "exit_code",
    "exit status",
    "exited with",
    "return code",
    "returncode",
    "exit_type",
    "worker exit",
    "exits with",
    "died",
    "sigsegv",
    "segmentation fault",
    "fatal python error",
    "illegal memory access",
    "core dumped",
    "sigabrt",
    "sigbus",
    "bus error",
    "device-side assert",
    "illegal instruction",
    "check failed",
    "terminate called",
    "terminated with",
    # hangs and collectives
    "timed out",
    "time out",
    "timeout",
    "watchdog",
    "barrier",
    "rendezvous",
    "collective",
    "subset of ranks",
    # ports
    "address already in use",
    "eaddrinuse",
    "errno",
    "10048",
    "10013",
    "one usage of each socket",
    "port number",
    "specified port",
    "failed to listen",
    "failed to bind",
    "socket communication",  # ML-Agents' worker port still in use
    "binding port",  # LightGBM's "Binding port 12402 failed"
    "no available ports",  # the raylet's worker port range used up
    "too many open files",  # EMFILE: what fails next (a port check, a sync) is not the cause
    # disks
    "no space left",
    "enospc",
    "disk quota",
    "disk is full",
    "outofdisk",
    "out-of-disk",
    "out of disk space",
    "has no capacity",
    "% full",
    "file write failed",
    "unexpected pos",
    "inline_container",
    # resources
    "insufficient",
    "cannot be sch",
    "cannot currently be sch",
    "no available node types",
    "could not find a node type",  # the autoscaler of Ray 1.x-2.x, as a warning
    "paused trials",
    "no trial resources",
    "resourcesunavailable",  # SkyPilot's ResourcesUnavailableError
    "resource_pool_exhausted",
    "is infeasible",
    "enough free resources",
    "not enough resou",
    "exceeds available gpus",
    "not started in the last",
    "worker group start",
    "per trial",
    "not enough gpus",  # NeMo RL's "Not enough GPUs available. Requested 16 GPUs, ..."
    "node configuration is not available",  # Slurm: no node has what one node is asked for
    "no trial is running",
    # storage
    "cluster storage",
    "storage path",
    "aws error",
    "access denied",
    "accessdenied",
    "forbidden",
    "nosuchbucket",
    "credentials",
    "refresherror",
    "metadata service",
    "storage.objects",
    "storage.buckets",
    "s3://",
    "gs://",
    "sync",
    "could not upload",
    "http response code 40",  # TensorFlow's GCS client refused (401 / 403)
    # the cluster: joining it, and the lines that say a connection worked
    "to gcs",
    "gcs server",
    "running ray instance",
    "to redis at",
    "from gcs",
    "ray cluster at",
    "gcs server is running",
    "api server address",
    "connecting to gcs",
    "to redis.",  # Ray 0.x: "Unable to connect to Redis. If the Redis instance is ..."
    "with redis",  # Ray 0.6: "... have not registered with Redis, so retrying"
    "start gcs",
    "connection to redis",
    "connect to ray at",
    "raylet addresses",
    "node_ip_address.json",
    "connected to ray cluster",
    "system config",  # a joining process that never got the cluster's config
    "error forwarding port",  # kubectl port-forward to a head pod whose port nobody listens on
    "started a local ray instance",
    "ray runtime started",
    # modules
    "no module named",
    "modulenotfound",
    # distributed, devices
    "nccl",
    "gloo",
    "ibv_",
    "shared memory",
    "/dev/shm",  # Ray's object store sized against it
    "</torch_",  # torch's shared-memory files
    "allocate receive fifo",  # UCX's shared-memory transport
    "duplicate gpu",
    "notify register",  # Ascend HCCL: "EI0002: The wait execution of the Notify register times out"
    "expected device",
    "compute device",  # FSDP: "Expects tensor to be on the compute device cuda:1"
    "same device",
    "buffers on device",
    "cuda and dense",
    "cuda backend",
    "same type of devices",
    "for generator",
    "backend type associated",
    "for value tensor",
    "device type",
    "weight type",
    "expected object of",
    # checkpoints
    "central directory",
    "zip archive",
    "pytorchstream",
    "ran out of input",
    "unexpected eof",  # torch's reader: "unexpected EOF, expected N more bytes"
    "unpickling",
    "unsupported operand",  # torch's weights_only unpickler meeting a byte no pickle has
    "magic number",
    "checksum does not match",
    "restoring from checkpoint failed",
    "assign requires shapes",
    "hccl",
    "placeholder storage",
    "http_store",
    "tasks to start",
    "barrier timed out",
    "job supervisor actor failed",
    "wrong byte size",
    "has wrong size",  # torch's legacy loader, older wording: "storage has wrong size: ..."
    "pickler archive",
    "proto opcode",
    "not in a subdirectory",
    "parameter group",
    "load key",
    "state_dict",
    "size mismatch for",
    "size mismatch between",
    "missing key",
    "unexpected key",
    "safetensor",
    "deserializing header",  # safetensors' errors with their class name cut off (ComfyUI)
    "headertoo",
    "invalidheaderdeserialization",
    "metadataincompletebuffer",
    "badzipfile",
    "crc",
    "ignore_mismatched_sizes",
    "checkpoint",
    # non-finite values
    "nan",
    "oom",
    "inf",
    "non-finite",
    "nonfinite",
    "invalid values",
    "loss scale",
    "overflow",
    "diverged",
    # Tune's own words
    "trials did not complete",
    "errored after",
    "completed after",
    "max_failures",
)
# Short anchors that are parts of common words ("nan" in "finance", "inf" in "INFO"): a line
# they alone make a candidate keeps its place only when they stand as words.
WEAK_ANCHORS = frozenset({"nan", "inf", "oom", "crc", "kill", "died", "sync", "signal "})
WEAK_WORDS = re.compile(
    r"\b(?:nan|inf|oom|crc|kill(?:ed|ing|s)?|died|signal \d+|"
    r"sync(?:ing)? (?:process |command )?(?:failed|error)|failed to sync)\b"
)


# Cause words looked for once per distinct template of a batch (weak: checked word by word), and
# those with digits, which a template cannot tell apart, in every line.
TEMPLATE_ANCHORS = tuple(
    (anchor, anchor in WEAK_ANCHORS) for anchor in CAUSE_ANCHORS if not has_digit(anchor)
)
NUMBERED_ANCHORS = tuple(anchor for anchor in CAUSE_ANCHORS if has_digit(anchor))


def hot_lines(
    texts: list[str], joined: str | None = None, starts: list[int] | None = None
) -> list[bool]:
    """For each line of a batch: does it hold a cause word? One pass of str.find per anchor
    over the batch's distinct lines with digits made `0` (a log's lines are a few templates:
    a batch of 4,096 raylet.out or training lines has tens), then the weak anchors' lines
    checked word by word. `joined`: the batch joined by newlines, when the caller has it."""
    low = ("\n".join(texts) if joined is None else joined).lower()
    lowered = low.split("\n")
    if len(lowered) != len(texts):  # a text held a newline: find each line's own span
        return _hot_lines_spanned(texts, low, line_starts(texts) if starts is None else starts)
    templates = line_templates(lowered)
    hot = [False] * len(texts)
    weak: set[int] = set()
    for anchor, is_weak in TEMPLATE_ANCHORS:
        for slot in lines_holding(anchor, templates.joined, templates.starts):
            if is_weak:
                weak.add(slot)
            else:
                for index in templates.members[slot]:
                    hot[index] = True
    for slot in weak:
        for index in templates.members[slot]:
            hot[index] = hot[index] or WEAK_WORDS.search(lowered[index]) is not None
    if any(anchor in low for anchor in NUMBERED_ANCHORS):
        low_starts = line_starts(lowered)
        for anchor in NUMBERED_ANCHORS:
            for index in lines_holding(anchor, low, low_starts):
                hot[index] = True
    return hot


def _hot_lines_spanned(texts: list[str], low: str, starts: list[int]) -> list[bool]:
    """`hot_lines` with each line found by where it starts in the joined text."""
    strong = [False] * len(texts)
    weak = [False] * len(texts)
    for anchor in CAUSE_ANCHORS:
        marks = weak if anchor in WEAK_ANCHORS else strong
        for index in lines_holding(anchor, low, starts):
            marks[index] = True
    return [
        is_strong or (is_weak and WEAK_WORDS.search(text.lower()) is not None)
        for text, is_strong, is_weak in zip(texts, strong, weak, strict=True)
    ]


def is_hot(text: str) -> bool:
    return hot_lines([text])[0]


@dataclass(frozen=True)
class EventPattern:
    kind: str
    pattern: re.Pattern[str]


# What a line says about the run. First match wins; "error-line" is the catch-all, after the
# cause words so a cause in an ERROR record is never dropped with the plain ones.
EVENT_PATTERNS = (
    EventPattern("trials-incomplete", re.compile(r"Trials did not complete")),
    EventPattern(
        "trial-errored",
        re.compile(r"Trial (?P<trial>\S+) errored after (?P<iterations>\d+) iterations"),
    ),
    EventPattern("trial-task-failed", re.compile(r"Trial task failed for trial (?P<trial>\S+)")),
    # Tune's status line that a trial finished after all (a retry that worked).
    EventPattern(
        "trial-completed", re.compile(r"Trial (?P<trial>\S+) completed after \d+ iterations")
    ),
    EventPattern(
        "interrupted",
        re.compile(r"^KeyboardInterrupt|Received SIGINT|Stop signal received|SIGTERM received"),
    ),
    EventPattern("training-failed", re.compile(r"Training (errored after|failed due to)")),
    # Which process is which rank (Train V2's worker group start), and the rows of a kill
    # notice's memory table: what says whose memory it was.
    EventPattern("worker-rank", re.compile(r"pid=(?P<pid>\d+)\) world_rank=\d+")),
    EventPattern("memory-row", re.compile(r"^\d+\t[\d.]+\t\S")),
    # Lines that can explain a failure whatever their level (kills, exits, resources, I/O) are
    # kept as "signal" here, when a line holds a cause word (`hot_lines`): rules decide what
    # they mean; this only keeps them (bounded per file).
    EventPattern(
        "error-line",
        re.compile(r"(^|\s)(ERROR|CRITICAL|FATAL)(\s|:|$)|^\[[\d\- :,]+ [EF] \d+ \d+\]"),
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
# Tracebacks Ray logs and carries on from, about nothing a run needs: Ray's autoscaler monitor
# and dashboard head start an optional Prometheus metrics server in a try/except that logs this
# line (monitor.py, dashboard/head.py). Its ports are fixed (44217, 44227), so every second Ray
# instance on a machine logs "Address already in use" here: not a port conflict of the run.
# Ray's atomic writes go through ".<uuid>-tmp-..." files it renames into place; a sync that
# lists the dir before the rename and copies after finds one gone (Ray 2.60 logs it as a failed
# experiment-state save and writes the state again right after).
RAY_TEMP_FILE = re.compile(r"/\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-tmp-")
HANDLED_BY_RAY = re.compile(
    r"An exception occurred while starting the metrics server|"
    # The dashboard agent's metrics exporter or HTTP server failing to bind (Ray 1.13-2.20,
    # metrics_agent.py, dashboard/agent.py): the agent and the run go on without them.
    r"Agent will stay alive but disable"
    # Train V2's controller asks the autoscaling coordinator for resources with a timeout and
    # logs the timeout's traceback under this warning, then goes on (Ray 2.5x-2.60,
    # autoscaling_coordinator_client.py, scaling_policy/elastic.py). Seen on a real run whose
    # NCCL error this traceback had displaced as the run's failure.
    r"|it's safe to ignore this error"
)

# Tune's status block, as each reporter prints it: the trial counts ("Number of trials: 1/1 (1
# PENDING)", tune/progress_reporter.py, Ray 0.8-2.60; "Trial status: 1 PENDING",
# tune/experimental/output.py, Ray 2.5-2.60), the resources running trials hold ("Resources
# requested: 0/5 CPUs", "Logical resource usage: 0/2 CPUs", tune/utils/resource_updater.py) and
# how long the run has gone on ("(running for 00:08:20.53)", "Total running time: 1min 0s").
# Only a log's last block says where its run stood, and a driver prints one every few seconds
# for hours: the parser keeps the last line of each kind apart from the events (whose cap they
# would fill) and hands the last block over as "tune-status" events when the log ends.
STATUS_NEEDLES = {
    "Number of trials: ": "trials",
    "Trial status: ": "trials",
    "Resources requested: ": "resources",
    "Logical resource usage: ": "resources",
    "(running for ": "time",
    "Total running time: ": "time",
}
# The resource and time lines of a block sit within this many lines of its trial counts
# (before them in the old reporter, after them in the new one).
STATUS_BLOCK_SPAN = 12


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


SIGNAL_BEFORE = "error-line"  # a cause word outranks the plain ERROR catch-all
# A line the catch-all matches holds one of these: a level word, or glog's ` E ` / ` F `
# between the timestamp and the pid (`[2026-11-22 06:31:39,836 E 14339 14339]`). Its own
# literal walk would settle for `[`, which every raylet.out line holds.
ERROR_LINE_NEEDLES = ("ERROR", "CRITICAL", "FATAL", " E ", " F ")


def live_events(text: str) -> tuple[EventPattern, ...]:
    """The event patterns that may match somewhere in `text` (a batch of lines joined), in
    their order; the catch-all always stays, as cause words are decided there."""
    return tuple(
        event
        for event in EVENT_PATTERNS
        if event.kind == SIGNAL_BEFORE or may_match(event.pattern, text)
    )


def _classify(
    line: str, hot: bool | None = None, patterns: tuple[EventPattern, ...] = EVENT_PATTERNS
) -> tuple[str, str | None] | None:
    """What a line says (its event kind, the trial it names), or None. `hot`: whether it holds
    a cause word, and `patterns`: those that may match, when the caller found them for a whole
    batch."""
    for event in patterns:
        if event.kind == SIGNAL_BEFORE and (is_hot(line) if hot is None else hot):
            return "signal", None
        match = event.pattern.search(line)
        if match:
            trial = match.groupdict().get("trial")
            return event.kind, trial.rstrip(".:,") if trial else None
    return None


@dataclass
class _Block:
    """A traceback being read: its lines and what decides where it ends."""

    lines: list[tuple[int, str]]
    header: bool  # it starts with "Traceback (most recent call last)"
    context: list[str]  # the non-empty lines before it
    pid: str | None  # the worker whose prefix its lines carry (None: unprefixed)
    after_exception: int = 0  # message lines allowed after an exception line
    pending_blank: tuple[int, str] | None = None
    ranks: set[int] = field(default_factory=set)  # `[rankN]:` prefixes of its lines
    raised: bool = False  # its exception line was read: what follows is only its message
    waiting_since: int = 0  # the line another process's output set it aside at


# Worker tracebacks set aside while other processes print: how many at once, and for how many
# lines one waits for its worker's next line (the driver prints a worker's lines in batches).
MAX_WAITING_BLOCKS = 16
MAX_WAIT_LINES = 200


class _TextLogParser:
    """Stream a text log; collect tracebacks and notable lines."""

    def __init__(
        self, path: str, pid: str | None = None, max_events: int = MAX_EVENTS_PER_FILE
    ) -> None:
        self.path = path
        self.max_events = max_events
        self.file_pid = pid  # the process a per-worker log file belongs to
        self.result = LogResult(files=[path])
        self.context: deque[str] = deque(maxlen=4)
        self.block: _Block | None = None
        # Workers' tracebacks set aside at another process's line, by pid (oldest first).
        self.waiting: dict[str, _Block] = {}
        self.record_start = False  # a collector's prefix stood before the current line
        self.error_lines = 0
        self.hot: bool | None = None  # the current line holds a cause word (batch-computed)
        self.patterns = EVENT_PATTERNS  # those that may match in the current batch
        self.status: dict[str, tuple[int, str]] = {}  # Tune status: the last line of each kind

    @staticmethod
    def _prepare(text: str) -> tuple[str, str | None] | None:
        """A line without Ray's dedup suffix and worker prefix, and the worker's pid when
        there was one; None for ray-doctor's own lines."""
        line = text
        if "[repeated " in line:  # a 200 MB session log has millions of plain lines
            line = DEDUP_SUFFIX.sub("", line)
        prefix = WORKER_PREFIX.match(line)
        pid = None  # set when the driver forwarded a worker's line
        if prefix:
            pid = prefix["pid"]
            line = line[prefix.end() :]
        if line.startswith(OWN_LINE_PREFIX):
            return None
        return line, pid

    def idle(self) -> bool:
        """No traceback open and no room for events: only a line that opens a traceback can
        change anything (the context kept for it aside)."""
        return self.block is None and not self.waiting and self.capped()

    def reading_a_traceback(self) -> bool:
        """A traceback is open, or set aside until its worker prints again: every line counts."""
        return self.block is not None or bool(self.waiting)

    def skip(self, lines: list[TextLine]) -> None:
        """What feeding `lines` does while `idle()` when none of them can open a traceback
        (see `may_open`): only the context of the last non-empty lines moves on."""
        last: list[str] = []
        for text_line in reversed(lines):
            prepared = self._prepare(text_line.text)
            if prepared is not None and prepared[0].strip():
                last.append(prepared[0])
                if len(last) == self.context.maxlen:
                    break
        self.context.extend(reversed(last))

    def feed(self, text_line: TextLine, hot: bool | None = None) -> None:
        self.hot = hot
        lineno = text_line.lineno
        self.record_start = text_line.prefixed
        prepared = self._prepare(text_line.text)
        if prepared is None:
            return
        line, pid = prepared
        if self.waiting or (self.block is not None and self.block.pid is not None):
            self._take_back(lineno, pid, bool(line.strip()))
        if self.block is not None and self._continues(lineno, line):
            if text_line.rank is not None:
                self.block.ranks.add(text_line.rank)
            return
        if self.block is not None:
            self._close()
        if line.startswith("Traceback (most recent call last)"):
            self._open(lineno, line, pid, header=True)
        elif FRAME.match(line):
            # A traceback pasted without its first line still starts with its frames.
            self._open(lineno, line, pid, header=False)
        elif (
            pid is None
            and STANDALONE_EXCEPTION.match(line)
            and not STANDALONE_WARNING.match(line)
            and is_exception_line(line)
        ):
            # An exception line with no traceback (a pasted error, a logged `repr`): a failure
            # of its own, with its message lines.
            self._open(lineno, line, pid, header=False, raised=True)
            self._event(lineno, line, pid)
        else:
            # Past the event cap the status lines seen would depend on how far the reader
            # happened to read line by line: the tail's block (`parse_text_log`) is the last word.
            room = not self.capped()
            self._event(lineno, line, pid)
            if room:
                self._note_status(lineno, line)
        if line.strip():
            self.context.append(line)
        if self.block is not None and text_line.rank is not None:
            self.block.ranks.add(text_line.rank)

    def _take_back(self, lineno: int, pid: str | None, printed: bool) -> None:
        """Before a line: set the open traceback aside if another process printed the line
        (the driver prefixes every line a worker prints, so one without that worker's prefix
        is someone else's: the driver's, another worker's, an IDE's); take a set-aside one
        back when its worker prints again; close those that waited too long."""
        block = self.block
        if block is not None and block.pid is not None and pid != block.pid and printed:
            self.block = None
            # Only a traceback still short of its exception line waits: past it, what the
            # worker prints next is new output (and a blank line of its own ended it).
            if not block.raised and block.pending_blank is None:
                block.waiting_since = lineno
                self.waiting[block.pid] = block
                if len(self.waiting) > MAX_WAITING_BLOCKS:
                    self._finish(self.waiting.pop(next(iter(self.waiting))))
            else:
                self._finish(block)
        if self.block is None and pid is not None and pid in self.waiting:
            self.block = self.waiting.pop(pid)
        for waiting_pid in [
            p for p, b in self.waiting.items() if lineno - b.waiting_since > MAX_WAIT_LINES
        ]:
            self._finish(self.waiting.pop(waiting_pid))

    def _open(
        self, lineno: int, line: str, pid: str | None, header: bool, raised: bool = False
    ) -> None:
        """Open a traceback at `line`; `raised`: the line is its exception, message to follow."""
        allowed = MAX_MESSAGE_CONTINUATION if raised else 0
        self.block = _Block([(lineno, line)], header, list(self.context), pid, allowed)
        self.block.raised = raised

    def _continues(self, lineno: int, line: str) -> bool:
        block = self.block
        assert block is not None
        if len(block.lines) >= MAX_TRACEBACK_LINES:
            return False
        if not line.strip():
            # A blank line ends a traceback unless a chained one follows; decide on the next.
            if block.pending_blank is not None:
                return False
            block.pending_blank = (lineno, line)
            return True
        blank, block.pending_blank = block.pending_blank, None
        chained = line.startswith(("Traceback (", "[Rank ")) or line.startswith(CHAIN_MARKERS)
        # A single blank line ends a traceback, unless a chained one follows or it sits inside
        # a long exception message (Ray's OOM text has blank lines in it).
        if blank is not None and not chained and block.after_exception <= 0:
            return False
        if blank is not None:
            block.lines.append(blank)
        if chained or line[0].isspace():
            block.lines.append((lineno, line))
            return True
        if is_exception_line(line):
            block.lines.append((lineno, line))
            block.after_exception = MAX_MESSAGE_CONTINUATION
            block.raised = True
            return True
        if BARE_FRAME.match(line):
            # A frame whose indentation was lost (copied from a rendered page): it and its
            # code line, unindented too, are still the traceback's.
            block.lines.append((lineno, line))
            block.after_exception = max(block.after_exception, 1)
            return True
        if block.after_exception > 0 and not self.record_start and not RECORD_START.match(line):
            block.after_exception -= 1
            block.lines.append((lineno, line))
            return True
        return False

    def _close(self) -> None:
        block, self.block = self.block, None
        if block is not None:
            self._finish(block)

    def _finish(self, open_block: _Block) -> None:
        """Turn a traceback read to its end into a failure, or an event when it is not one."""
        block = open_block.lines
        if not block or len(self.result.failures) >= MAX_FAILURES_PER_FILE:
            return
        failure = parse_failure(block[1:] if open_block.header else block, self.path)
        failure.source = Evidence(self.path, block[0][0], block[0][1].strip())
        failure.ranks += sorted(open_block.ranks - set(failure.ranks))
        recent = open_block.context[-2:]
        if any(HANDLED_BY_RAY.search(text) for text in recent[-1:]):
            return
        if failure.exc_type == "FileNotFoundError" and RAY_TEMP_FILE.search(failure.message):
            return  # Ray's own temp file, renamed away while a sync copied the dir: a race
        background = any(BACKGROUND_CONTEXT.search(text) for text in recent[-1:])
        claimed = any(marker in text for text in recent for marker in FAILURE_CONTEXT)
        if background or (open_block.pid is not None and not claimed):
            if not self.capped():
                where = failure.exc_line or failure.source
                excerpt = f"{failure.summary}"[:MAX_EXCERPT]
                self.result.events.append(
                    LogEvent("traceback", Evidence(where.path, where.line, excerpt))
                )
            return
        trial = None
        for text in reversed(open_block.context):
            match = TRIAL_IN_CONTEXT.search(text)
            if match:
                trial = match["trial"].rstrip(".:,")
                break
        self.result.failures.append((failure, trial))

    def _event(self, lineno: int, line: str, pid: str | None = None) -> None:
        if self.capped() or not line.strip():
            return
        found = _classify(line, self.hot, self.patterns)
        if found:
            kind, trial = found
            if kind == "error-line":
                if self.error_lines >= MAX_ERROR_LINES_PER_FILE:
                    return
                self.error_lines += 1
            if pid is None:
                in_line = PID_IN_LINE.search(line)
                pid = in_line["pid"] if in_line else self.file_pid
            evidence = Evidence(self.path, lineno, line)
            text = line.strip()[:MAX_LINE_TEXT]
            self.result.events.append(
                LogEvent(kind, evidence, trial, int(pid) if pid else None, text)
            )

    def _note_status(self, lineno: int, line: str) -> None:
        """Keep a line of Tune's status block: the latest of its kind."""
        for needle, kind in STATUS_NEEDLES.items():
            if needle in line:
                self.status[kind] = (lineno, line.strip()[:MAX_LINE_TEXT])
                return

    def status_events(self) -> list[LogEvent]:
        """The log's last Tune status block: its trial counts, with the resource and time
        lines printed beside them (none when the log printed no trial counts)."""
        trials = self.status.get("trials")
        if trials is None:
            return []
        block = [
            found
            for found in self.status.values()
            if abs(found[0] - trials[0]) <= STATUS_BLOCK_SPAN
        ]
        return [
            LogEvent(TUNE_STATUS, Evidence(self.path, lineno, line), pid=None, text=line)
            for lineno, line in sorted(block)
        ]

    def capped(self) -> bool:
        """The file has given all the events it may: only a traceback can add anything."""
        return len(self.result.events) >= self.max_events

    def full(self) -> bool:
        """Both caps reached: no later line can add an event or a failure."""
        return self.capped() and len(self.result.failures) >= MAX_FAILURES_PER_FILE

    def finish(self) -> LogResult:
        """What the log yielded; its last Tune status block comes last among the events."""
        self._close()
        while self.waiting:
            self._finish(self.waiting.pop(next(iter(self.waiting))))
        # Tracebacks set aside end after those read straight through: keep the text's order.
        self.result.failures.sort(key=lambda found: found[0].source.line or 0)
        self.result.events += self.status_events()
        return self.result


def parse_text_log(
    lines: Iterable[str] | LineSource, path: str, pid: str | None = None, pasted: bool = True
) -> LogResult:
    """A driver log, a worker .err/.out, or any text; error.txt content is recognised.
    `pasted=False`: a log Ray's own processes wrote, read without the paste normaliser.
    A `LineSource` (a stored file) lets the reader jump over lines in the raw bytes."""
    source = lines if isinstance(lines, LineSource) else None
    numbered = source if source is not None else enumerate(lines, start=1)
    # A stored file known to be long is streamed from its first line: only short texts are
    # read whole (to undo hard wrapping), and holding back its head kept the reader from
    # jumping over the head's lines.
    long = source is not None and pasted and source.has_lines(MAX_BUFFERED_LINES)
    logical = normalise_numbered(numbered, long) if pasted else machine_numbered(numbered)
    head: list[TextLine] = []
    for line in logical:
        head.append(line)
        if line.text.strip():
            break
    if head and HEADER.match(head[-1].text):
        failures = parse_error_text(_chain(head, logical), path)
        return LogResult(failures=[(f, None) for f in failures], files=[path])
    parser = _TextLogParser(path, pid)
    if source is not None:
        _skim(source, pasted, short=pasted and not long)
    # Text that comes as lines (standard input) keeps its last lines past the cap for the tail;
    # a stored file's LineSource keeps its last bytes.
    late: deque[TextLine] | None = deque(maxlen=TAIL_LINES) if source is None else None
    for batch in _batches(_chain(head, logical)):
        if late is not None and parser.full():  # nothing more but its tail's events
            late.extend(batch)
            continue
        if parser.capped():
            _feed_past_the_cap(parser, batch)
        else:
            _feed_batch(parser, batch)
        if parser.capped():
            if late is not None:
                late.extend(batch)
                continue
            if not parser.full():
                _read_past_the_cap(parser, source, logical, pasted)
            break
    capped = parser.capped()
    result = parser.finish()
    if not capped:
        return result
    if late is not None:
        tail: Iterable[TextLine] = late
    elif source is not None and source.keeps_tail:
        # The tail is skimmed too, unless a pasted text may be short enough to be read whole.
        skimmer = _skimmer(pasted) if long or not pasted else None
        numbered = source.tail_lines(skimmer)
        if not pasted:
            tail = machine_numbered(numbered)
        else:
            tail = normalise_numbered(numbered, long=skimmer is not None)
    else:
        return result
    status = [e for e in result.events if e.kind == TUNE_STATUS]
    del result.events[len(result.events) - len(status) :]
    events = _tail_events(tail, path, pid, after=result.events[-1].source.line or 0)
    tail_status = [e for e in events if e.kind == TUNE_STATUS]
    # A status block in the tail is the run's last word on where it stood.
    result.events += [e for e in events if e.kind != TUNE_STATUS] + (tail_status or status)
    return result


def _tail_events(
    logical: Iterable[TextLine], path: str, pid: str | None, after: int
) -> list[LogEvent]:
    """The events of a text's last lines past line `after`, where its event cap was reached:
    the last TAIL_EVENTS of them, then the tail's last Tune status block. Failures are not
    taken here: past the cap the reader still found every traceback."""
    parser = _TextLogParser(path, pid, max_events=sys.maxsize)
    for batch in _batches(iter(logical)):
        _feed_batch(parser, batch)
    status = parser.status_events()
    events = parser.finish().events[: len(parser.result.events) - len(status)]
    events = [event for event in events if (event.source.line or 0) > after]
    return events[-TAIL_EVENTS:] + status


def _feed_batch(parser: _TextLogParser, batch: list[TextLine]) -> None:
    """Feed a batch of lines before the file's event cap. Only some lines can change what the
    parser keeps: one that may open a traceback, holds a cause word, or holds what a live event
    pattern needs. They are found for the whole batch at once (`_lines_that_matter`); the runs
    between them, while no traceback is open, only move the parser's context on (`skip`),
    instead of each line costing a walk through the parser's tests."""
    texts = [line.text for line in batch]
    joined = "\n".join(texts)
    starts = line_starts(texts)
    parser.patterns = live_events(joined)
    hot = hot_lines(texts, joined, starts)
    wanted = _lines_that_matter(texts, joined, starts, hot, parser.patterns)
    if wanted is None:  # a live pattern with nothing to look for: every line may matter
        wanted = range(len(batch))
    index = 0
    for target in (*wanted, len(batch)):
        while index < target and parser.reading_a_traceback():
            parser.feed(batch[index], hot[index])  # inside a traceback every line counts
            index += 1
        if index < target:
            parser.skip(batch[index:target])
            index = target
        if index < len(batch):
            parser.feed(batch[index], hot[index])
            index += 1
    parser.patterns = EVENT_PATTERNS


def _lines_that_matter(
    texts: list[str],
    joined: str,
    starts: list[int],
    hot: list[bool],
    patterns: tuple[EventPattern, ...],
) -> list[int] | None:
    """Indices of the lines of a batch that may open a traceback, hold a cause word, or hold
    what one of `patterns` needs (ascending); None when a pattern has nothing to look for."""
    found = {i for i, text in enumerate(texts) if hot[i] or _may_stand_alone(text)}
    for needle in (*OPENER_NEEDLES, *STATUS_NEEDLES):
        found.update(lines_holding(needle, joined, starts))
    for event in patterns:
        if event.kind == SIGNAL_BEFORE:
            for needle in ERROR_LINE_NEEDLES:
                found.update(lines_holding(needle, joined, starts))
            continue
        candidates = lines_that_may_match(event.pattern, joined, starts)
        if candidates is None:
            return None
        found.update(candidates)
    return sorted(found)


def _feed_past_the_cap(parser: _TextLogParser, batch: list[TextLine]) -> None:
    """Cause words only decide which lines become events, and this file has all it keeps (a
    100 MB raylet.out reaches that in its first few percent): from then on only a traceback
    can add anything, and runs of lines that cannot start one are passed over whole."""
    start = 0
    while start < len(batch):
        if parser.idle():
            opener = _first_opener(batch, start)
            parser.skip(batch[start:opener])
            start = opener
            if start == len(batch):
                break
        parser.feed(batch[start])
        start += 1


def _read_past_the_cap(
    parser: _TextLogParser, source: LineSource, logical: Iterator[TextLine], pasted: bool
) -> None:
    """`_feed_past_the_cap` for a stored file, one line at a time: whenever the parser is idle
    the source jumps in the raw bytes to the next line an opener finds (`PASTED_OPENERS`), and
    the lines it passed over only move the parser's context on."""
    source.select = None  # from here on the parser's state says what to pass over
    source.should_skip = parser.idle
    to_text = normalise_numbered if pasted else machine_numbered
    for line in logical:
        if source.passed_over:
            parser.skip(list(to_text(source.passed_over)))
            source.passed_over.clear()
        if parser.idle() and not _may_open(line):
            parser.skip([line])  # it holds a needle, yet cannot open a traceback
        else:
            parser.feed(line)
        if parser.full():
            break
    source.should_skip = None


def _skim(source: LineSource, pasted: bool, short: bool) -> None:
    """Let a stored file hand out only the lines the parser could act on (`scan/_skim.py`),
    from the line after those read so far; a pasted log that may be `short` only past the
    head it reads whole (to undo hard wrapping)."""
    source.select = _skimmer(pasted)
    source.select_from = MAX_BUFFERED_LINES if short else 0


def _skimmer(pasted: bool) -> Skimmer | None:
    """A skimmer for a text log read from somewhere in its middle (a traceback may be open)."""
    needles = _skim_needles(pasted)
    if needles is None:
        return None
    return Skimmer(needles, _PASTED_VIEW if pasted else _MACHINE_VIEW, open_at_start=True)


def _seen_line(raw: bytes, pasted: bool) -> str | None:
    text = logical_text(raw.decode("utf-8", "replace"), pasted)
    if text is None:
        return MANY
    prepared = _TextLogParser._prepare(text)
    return None if prepared is None else prepared[0]


def _opens(text: str) -> int | None:
    """`_TextLogParser.feed`'s tests for a line that opens a traceback (whatever its worker
    prefix said): the message lines allowed after it, None when it opens none."""
    if text.startswith("Traceback (most recent call last)") or FRAME.match(text):
        return 0
    if (
        STANDALONE_EXCEPTION.match(text)
        and not STANDALONE_WARNING.match(text)
        and is_exception_line(text)
    ):
        return MAX_MESSAGE_CONTINUATION
    return None


def _may_continue(text: str, allowance: int) -> int | None:
    """`_TextLogParser._continues`, taking every doubt as a yes (a second blank line, a record
    start, the length cap): the message lines still allowed, None when the line ends it."""
    if not text.strip():
        return allowance
    if text[0].isspace() or text.startswith(("Traceback (", "[Rank ", *CHAIN_MARKERS)):
        return allowance
    if is_exception_line(text):
        return MAX_MESSAGE_CONTINUATION
    if BARE_FRAME.match(text):
        return max(allowance, 1)
    return allowance - 1 if allowance > 0 else None


_PASTED_VIEW = ReaderView(
    lambda raw: _seen_line(raw, True), _opens, _may_continue, MAX_MESSAGE_CONTINUATION
)
_MACHINE_VIEW = ReaderView(
    lambda raw: _seen_line(raw, False), _opens, _may_continue, MAX_MESSAGE_CONTINUATION
)
# A JSON-lines record (`_json_texts`): `{` first, after any white space.
JSON_RECORD = re.compile(rb"(?m)^[ \t\r\f\v\x1c-\x1f\x80-\xff]*\{")
PASTED_CR = re.compile(INNER_CR.encode())
# A row of a kill notice's memory table ("memory-row": a pid, a tab, a figure, a tab): a line
# with two tabs. Its literal, a tab, is in every record of Ray's Python logger.
MEMORY_ROW = re.compile(rb"\t[^\n]*\t")
# Characters whose lowercase holds an ASCII letter (KELVIN SIGN is `k`): a cause word may
# appear in a lowered line without being in its lowered bytes.
LOWERED_TO_ASCII = ("\u0130", "\u212a")
_SKIM_NEEDLES: dict[bool, SkimNeedles | None] = {}


def _skim_needles(pasted: bool) -> SkimNeedles | None:
    """Whatever makes the parser act on a line, as `Skimmer` looks for it; None when an event
    pattern has no literal to look for (then every line is read)."""
    if pasted in _SKIM_NEEDLES:
        return _SKIM_NEEDLES[pasted]
    exact = [
        *ERROR_LINE_NEEDLES,
        *STATUS_NEEDLES,
        "Traceback (",
        "File ",
        *EXC_SUFFIXES,
        *EXC_NAMES,
        *LOWERED_TO_ASCII,
        *(REWRITE_MARKERS if pasted else ("\x1b",)),
    ]
    blind = [anchor for anchor in CAUSE_ANCHORS if anchor not in WEAK_ANCHORS]
    found: SkimNeedles | None = None
    for event in EVENT_PATTERNS:
        if event.kind in (SIGNAL_BEFORE, "memory-row"):
            continue  # ERROR_LINE_NEEDLES; MEMORY_ROW
        needed = requirements(event.pattern)
        if needed is None:
            break
        (first, *_), is_blind = needed
        (blind if is_blind else exact).extend(first)
    else:
        found = skim_needles(
            exact,
            blind,
            exact_patterns=(MEMORY_ROW, JSON_RECORD, PASTED_CR) if pasted else (MEMORY_ROW,),
            blind_patterns=(re.compile(WEAK_WORDS.pattern.encode()),),
        )
    _SKIM_NEEDLES[pasted] = found
    return found


IDENTIFIER_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
# With a line starting with a name (IDENTIFIER_START), what `_may_open` looks for.
OPENER_NEEDLES = ('File "', "Traceback (")


def _may_open(line: TextLine) -> bool:
    """Whether a line might open a traceback. A superset of `_TextLogParser.feed`'s tests:
    "Traceback (most recent call last)", a frame (`  File "...`), or an exception line
    standing alone (`_may_stand_alone`: with no worker prefix, so from the line's own first
    character)."""
    text = line.text
    return _may_stand_alone(text) or any(needle in text for needle in OPENER_NEEDLES)


def _may_stand_alone(text: str) -> bool:
    """Whether a line may be an exception line standing alone, which opens a failure of its
    own (`_TextLogParser.feed`: a name, `: `, text; the name's ending is checked there). Most
    lines that start with a letter are log records and prints that are not."""
    return text[:1] in IDENTIFIER_START and STANDALONE_EXCEPTION.match(text) is not None


def _first_opener(batch: list[TextLine], start: int) -> int:
    """The index of the first line from `start` that `_may_open` (len(batch): none)."""
    for index in range(start, len(batch)):
        if _may_open(batch[index]):
            return index
    return len(batch)


def _batches(lines: Iterator[TextLine], size: int = HOT_BATCH) -> Iterator[list[TextLine]]:
    while batch := list(islice(lines, size)):  # islice: no Python step per line
        yield batch


def _chain(head: list[TextLine], rest: Iterator[TextLine]) -> Iterator[TextLine]:
    return chain(head, rest)


def parse_json_log(lines: Iterable[str], path: str) -> LogResult:
    """Ray Train V2's logs/train/*.log: one JSON record per line. Every record is decoded
    anyway, so past the event cap the last TAIL_EVENTS events are kept (the run's end)."""
    result = LogResult(files=[path])
    late: deque[LogEvent] = deque(maxlen=TAIL_EVENTS)
    for lineno, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        level = str(record.get("levelname", ""))
        message = str(record.get("message", ""))
        rank = record.get("world_rank")
        if message.strip():
            found = _classify(message)
            if level in ("ERROR", "CRITICAL") or found:
                kind = "error-line" if level in ("ERROR", "CRITICAL") else found[0]
                first = message.strip().splitlines()[0][:MAX_LINE_TEXT]
                event = LogEvent(kind, Evidence(path, lineno, message), text=first)
                capped = len(result.events) >= MAX_EVENTS_PER_FILE
                (late if capped else result.events).append(event)
        exc_text = record.get("exc_text")
        if isinstance(exc_text, str) and exc_text.strip() and not HANDLED_BY_RAY.search(message):
            block = [(lineno, text) for text in exc_text.splitlines()]
            failure = parse_failure(block, path)
            # One JSON record holds the whole traceback: its exception line is the excerpt.
            failure.source = failure.exc_line or Evidence(path, lineno, message or exc_text)
            if isinstance(rank, int) and rank not in failure.ranks:
                failure.ranks.append(rank)
            result.failures.append((failure, None))
    result.events += late
    return result


# A line that can open a traceback (`_TextLogParser.feed`: a "Traceback (" header, a
# `File "` frame, or an exception line standing alone, whose type name ends in one of
# EXC_SUFFIXES or is one of EXC_NAMES) holds one of these in its raw bytes, whatever a
# collector put around it: prefixes, colour codes, `&quot;` or `\"` for the quote (hence
# `File ` without it), JSON records.
PASTED_OPENERS: tuple[Opener, ...] = tuple(
    dict.fromkeys(
        text.encode()
        for text in ("Traceback (", "File ", *EXC_SUFFIXES, *EXC_NAMES)
        if not any(suffix in text for suffix in EXC_SUFFIXES if suffix != text)
    )
)
# In a log Ray's own processes wrote only colour codes come off a line, so an exception line
# standing alone (`STANDALONE_EXCEPTION` whose name passes `is_exception_line`) starts the line,
# after colour codes if any: a dotted name whose last part ends like an exception's, then `: `.
# (`\w` of a str pattern is Unicode: here a name's non-ASCII bytes are taken as word bytes.)
_NAME_END = b"|".join(name.encode() for name in (*EXC_SUFFIXES, *sorted(EXC_NAMES)))
MACHINE_OPENERS: tuple[Opener, ...] = (
    re.compile(
        rb"\n(?:\x1b\[[0-9;?]*[A-Za-z])*(?:[A-Za-z_][\w\x80-\xff]*\.)*"
        rb"(?=[A-Za-z_])[\w\x80-\xff]*(?:" + _NAME_END + rb")(?:\([\w.\x80-\xff]+\))?: "
    ),
    b'File "',
    b"Traceback (",
)


def read_log_file(storage: Storage, path: str) -> LogResult:
    try:
        openers = PASTED_OPENERS if _pasted(path) else MACHINE_OPENERS
        source = LineSource(storage.iter_chunks(path), openers, tail=TAIL_BYTES)
        return parse_log(source, path, storage.display(path))
    except StorageError as exc:
        return LogResult(errors=[ScanError(exc.path, exc.reason)])


def read_text_stream(stream: BinaryIO, name: str) -> LogResult:
    """Text piped in (`kubectl logs ... | ray-doctor inspect -`), read as its bytes as a stored
    file is (skimmed when long, its last TAIL_BYTES kept for the tail), so the same bytes give
    the same report either way."""
    chunks = iter(lambda: stream.read(CHUNK_SIZE), b"")  # blocks for a whole chunk, as a file
    return parse_text_log(LineSource(chunks, PASTED_OPENERS, tail=TAIL_BYTES), name)


# Ray's own processes write these (raylet, GCS, core worker, autoscaler): nobody pastes them,
# so they skip the paste normaliser (a 200 MB raylet.out is read line by line).
SYSTEM_LOG = re.compile(r"^(raylet|gcs_server|python-core-(worker|driver)-|monitor|runtime_env_)")


def parse_log(lines: Iterable[str] | LineSource, path: str, display: str) -> LogResult:
    """A session log by its path: Train V2's JSON records under train/, else text (a worker
    log's pid taken from its name; Ray's own process logs skip the paste normaliser)."""
    path = path.replace("\\", "/")
    if path.endswith(".log") and "/train/" in path:
        texts = (text for _, text in lines) if isinstance(lines, LineSource) else lines
        return parse_json_log(texts, display)
    owner = WORKER_LOG_PID.match(path.rsplit("/", 1)[-1])
    return parse_text_log(lines, display, owner["pid"] if owner else None, pasted=_pasted(path))


def _pasted(path: str) -> bool:
    """Whether a log is read with the paste normaliser: all but Ray's own processes' logs."""
    return not SYSTEM_LOG.match(path.replace("\\", "/").rsplit("/", 1)[-1])


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


def session_logs_within(storage: Storage, path: str, entries: list[Entry]) -> str | None:
    """The session logs dir a dir stands for when it holds none itself: a session dir's
    `logs/` (`/tmp/ray/session_latest`), or Ray's temp dir's latest session (`/tmp/ray`:
    `session_latest`, else the newest `session_*`, whose names sort by time). None if neither."""
    dirs = {entry.name: entry for entry in entries if entry.is_dir}
    if "logs" in dirs:
        return _if_session_logs(storage, dirs["logs"].path)
    sessions = sorted(name for name in dirs if name.startswith("session_"))
    if "session_latest" in dirs:
        sessions.append("session_latest")
    if not sessions:
        return None
    return _if_session_logs(storage, storage.join(dirs[sessions[-1]].path, "logs"))


def _if_session_logs(storage: Storage, path: str) -> str | None:
    try:
        return path if is_session_logs_dir(storage.list_dir(path)) else None
    except StorageError:
        return None


NO_SESSION_LOGS = (
    "no Ray session logs here (raylet.out, gcs_server.out, worker-*.out/.err, ...); Ray "
    "writes them to /tmp/ray/session_latest/logs on each node"
)


# Session logs bigger than this in all are read by forked processes, a file per task: a
# long session's raylet.out, gcs_server.out and worker logs each cost a second or more.
PARALLEL_LOG_BYTES = 32 * 2**20


def read_session_logs(
    storage: Storage, path: str, progress: Callable[[int, int], None] | None = None
) -> LogResult:
    """A `/tmp/ray/session_*/logs` dir, including its `train/` subdir. `progress(done, total)`
    hears of each file read (a long session's logs run to gigabytes)."""
    result = LogResult()
    files: list[Entry] = []
    try:
        entries = storage.list_dir(path)
    except StorageError as exc:
        result.errors.append(ScanError(exc.path, exc.reason))
        return result
    if not is_session_logs_dir(entries):
        within = session_logs_within(storage, path, entries)
        if within is not None:
            return read_session_logs(storage, within, progress)
    for entry in entries:
        if entry.is_dir and entry.name == "train":
            try:
                train_entries = storage.list_dir(entry.path)
            except StorageError as exc:
                result.errors.append(ScanError(exc.path, exc.reason))
                continue
            files += [e for e in train_entries if e.is_file and e.name.endswith(".log")]
        elif entry.is_file and SESSION_LOG.match(entry.name):
            files.append(entry)
    if not files:
        result.errors.append(ScanError(storage.display(path), NO_SESSION_LOGS))
    for done, found in enumerate(_read_files(storage, files), start=1):
        if progress:
            progress(done, len(files))
        result.extend(found)
    return result


def _read_files(storage: Storage, files: list[Entry]) -> Iterator[LogResult]:
    """`read_log_file` of each file, in their order; big local sets in forked processes, the
    biggest files started first so one long file does not run alone at the end."""
    if not (isinstance(storage, LocalStorage) and len(files) > 1 and can_fork()):
        yield from (read_log_file(storage, entry.path) for entry in files)
        return
    sizes = [_size(storage, entry) for entry in files]  # a local stat each: microseconds
    if sum(sizes) < PARALLEL_LOG_BYTES:
        yield from (read_log_file(storage, entry.path) for entry in files)
        return
    pool = forked_pool(min(cpus(), len(files)))
    try:
        by_size = sorted(range(len(files)), key=lambda i: -sizes[i])
        futures = {i: pool.submit(read_log_file, storage, files[i].path) for i in by_size}
        for index in range(len(files)):
            yield futures[index].result()
    except BaseException:
        # Ctrl-C: drop the files not started; readers end after their file (see _pool).
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()


def _size(storage: Storage, entry: Entry) -> int:
    if entry.size is not None:
        return entry.size
    try:
        found = storage.stat(entry.path)
    except StorageError:
        return 0  # read_log_file reports it
    return (found.size or 0) if found else 0


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
