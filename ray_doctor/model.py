"""The one experiment model every layout reader produces and every rule reads.

Readers in `ray_doctor.scan` turn Tune, Train V1, Train V2, single trial dirs and plain
logs into these dataclasses; rules and reports never touch files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from enum import Enum
from functools import lru_cache
from operator import attrgetter
from typing import Any

from ray_doctor._literals import may_match


class Layout(str, Enum):
    """What kind of thing a scanned path turned out to be."""

    STORAGE = "storage"  # a storage_path holding several experiments
    TUNE = "tune"  # Tune experiment dir, Ray >= 2.7 persistence
    TUNE_LEGACY = "tune-legacy"  # Tune experiment dir written before the 2.7 storage rewrite
    TRAIN_V1 = "train-v1"  # Train V1: a Tune experiment with one TorchTrainer_* trial
    TRAIN_V2 = "train-v2"  # Train V2 run dir: checkpoint_manager_snapshot.json, no trial dirs
    TRIAL = "trial"  # a single trial dir given on its own
    LOG = "log"  # plain log text: a driver log, an error.txt, a worker .err, stdin


class TrialStatus(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"
    UNKNOWN = "UNKNOWN"

    @property
    def unfinished(self) -> bool:
        return self in (TrialStatus.PENDING, TrialStatus.RUNNING, TrialStatus.PAUSED)


def _pickled_by_fields(cls: type) -> type:
    """Pickle a slotted dataclass as the arguments of its constructor.

    The forked trial readers send every trial back pickled (some 40 objects each), and the
    reducer `dataclass` gives a slotted class walks `fields()` in Python for every object:
    10,000 trials took 0.27 s to pickle and 0.16 s to unpickle, 0.17 s and 0.10 s this way.
    A field kept out of `__init__` is a cache, worked out again when it is asked for."""
    get = attrgetter(*(f.name for f in fields(cls) if f.init))

    def __reduce__(self: Any) -> tuple[type, tuple[Any, ...]]:
        return cls, get(self)

    cls.__reduce__ = __reduce__  # type: ignore[method-assign]
    return cls


MAX_EXCERPT = 300


def one_line(text: str, limit: int = MAX_EXCERPT) -> str:
    """The first non-empty line of `text`, cut to `limit` characters: an evidence excerpt."""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Evidence:
    """A pointer into the inspected data: which file, which line, what it said (one line)."""

    path: str
    line: int | None = None
    excerpt: str = ""

    def __post_init__(self) -> None:
        if "\n" in self.excerpt or len(self.excerpt) > MAX_EXCERPT:
            object.__setattr__(self, "excerpt", one_line(self.excerpt))


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Frame:
    """One traceback frame."""

    file: str
    line: int
    function: str
    code: str | None = None


@lru_cache(maxsize=512)
def _per_line(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """`pattern` with ^ and $ at every line's ends, to search a block of lines at once."""
    return re.compile(pattern.pattern, pattern.flags | re.MULTILINE)


@_pickled_by_fields
@dataclass(slots=True)
class Failure:
    """One failure: a `Failure # N` block of error.txt, or a traceback found in a log."""

    number: int | None  # N of "Failure # N"; None for failures read from logs
    time: str | None  # as Ray wrote it, e.g. "2025-01-01_12-00-00"
    exc_type: str | None  # innermost exception type, e.g. "ValueError"
    message: str  # the exception message (first lines), "" if none
    wrapper: str | None = None  # Ray's wrapper, e.g. "RayTaskError", "ActorDiedError"
    frames: list[Frame] = field(default_factory=list)
    user_frame: Frame | None = None  # the last frame outside Ray, torch and the stdlib
    ranks: list[int] = field(default_factory=list)  # Train worker ranks named in the text
    text: str = ""  # the block itself, capped, ANSI codes removed
    source: Evidence | None = None  # where the block starts
    exc_line: Evidence | None = None  # where the exception line is
    # (index of a line in `text`, its line number in `source.path`) where a run of
    # consecutive lines starts: blocks are capped to their head and tail, so there can be two.
    line_map: list[tuple[int, int]] = field(default_factory=list)

    # `joined`'s cache: a field set in __init__, so every Failure's attribute dict has the
    # same keys from the start (a key added later, as cached_property does, grew each dict).
    _joined_text: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def joined(self) -> str:
        """The block's lines joined by newlines (the lines `lines()` yields): `text` itself,
        not a copy, when splitting and joining gives it back (the scan joins with newlines)."""
        if self._joined_text is None:
            joined = "\n".join(self.text.splitlines())
            self._joined_text = self.text if joined == self.text else joined
        return self._joined_text

    @property
    def summary(self) -> str:
        kind = self.exc_type or "unknown error"
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{kind}: {one_line(first)}" if first else kind

    def lines(self) -> Iterator[tuple[int | None, str]]:
        """The block's lines with their line numbers in the file they came from."""
        runs = self.line_map
        run = -1
        for index, line in enumerate(self.text.splitlines()):
            while run + 1 < len(runs) and runs[run + 1][0] <= index:
                run += 1
            yield (runs[run][1] + index - runs[run][0] if run >= 0 else None), line

    def evidence_for(self, pattern: re.Pattern[str]) -> tuple[Evidence, re.Match[str]] | None:
        """The first line of the block matching `pattern`, as evidence."""
        # One search of the whole block first: most signatures are absent, and a failing
        # sweep asks every failure about every signature (a line-by-line walk each time cost
        # 17 s on 5,000 failed trials). In MULTILINE mode a match within a line is also a
        # match in the block, so a miss here is a miss on every line. Before that, a literal
        # the pattern cannot match without (`_literals.needles`) is looked for with `in`.
        if not may_match(pattern, self.joined):
            return None
        return self.screened_evidence_for(pattern)

    def screened_evidence_for(
        self, pattern: re.Pattern[str]
    ) -> tuple[Evidence, re.Match[str]] | None:
        """`evidence_for` once `pattern`'s literals are known to be in the block."""
        if not _per_line(pattern).search(self.joined):
            return None
        path = self.source.path if self.source else ""
        for lineno, line in self.lines():
            match = pattern.search(line)
            if match:
                return Evidence(path, lineno, line), match
        return None


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Restart:
    """A point in result.json where a trial started over (iterations_since_restore back to 1)."""

    line: int  # result.json line of the first row after the restart
    from_iteration: int | None  # training_iteration reached before the restart
    to_iteration: int | None  # training_iteration of the first row after it

    @property
    def iterations_lost(self) -> int | None:
        if self.from_iteration is None or self.to_iteration is None:
            return None
        return max(0, self.from_iteration - self.to_iteration + 1)


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class NonFinite:
    """A reported metric that became NaN or +/-Infinity."""

    metric: str
    value: str  # "NaN", "Infinity" or "-Infinity"
    first_line: int
    first_iteration: int | None
    rows: int  # rows (of the ones examined) where this metric was non-finite


@_pickled_by_fields
@dataclass(slots=True)
class History:
    """What a trial's result.json (or progress.csv) says, summarised in one streaming pass."""

    path: str
    rows: int = 0
    first_iteration: int | None = None
    last_iteration: int | None = None
    max_iteration: int | None = None
    first_time: float | None = None
    last_time: float | None = None
    last_row: dict[str, Any] | None = None  # progress.csv's last row (result.json: last_line)
    last_line: bytes | None = None  # result.json's last row, parsed only when needed
    restarts: list[Restart] = field(default_factory=list)  # the first ones, with positions
    restart_count: int = 0  # all of them
    nonfinite: list[NonFinite] = field(default_factory=list)
    nonfinite_rows: int = 0
    # training_iteration at which checkpoints were reported: those on storage, and the last one.
    checkpoint_iterations: dict[str, int | None] = field(default_factory=dict)
    latest_checkpoint: str | None = None  # the last checkpoint_dir_name reported
    bad_lines: list[int] = field(default_factory=list)  # lines that are not one JSON object
    truncated_tail: bool = False  # the last line was cut off mid-write


@_pickled_by_fields
@dataclass(slots=True)
class Checkpoint:
    """A checkpoint dir on storage, or one the experiment's records name."""

    name: str
    path: str
    index: int | None = None  # the number in checkpoint_NNNNNN (a counter, not an iteration)
    iteration: int | None = None  # training_iteration of the row that reported it
    exists: bool = True
    metrics: dict[str, Any] = field(default_factory=dict)  # Train V2 snapshot metrics


@_pickled_by_fields
@dataclass(slots=True)
class Trial:
    trial_id: str
    name: str  # the trial dir name, or the trial id when it never got a dir
    path: str | None  # the trial dir (None: never started)
    status: TrialStatus
    config: dict[str, Any] = field(default_factory=dict)
    max_failures: int | None = None
    num_failures: int | None = None  # Tune's own count, from experiment_state
    start_time: float | None = None
    last_result_time: float | None = None
    last_result: dict[str, Any] = field(default_factory=dict)
    history: History | None = None
    failures: list[Failure] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    error_file: str | None = None
    in_state: bool = True  # listed in the newest experiment_state (False: only a dir on storage)
    # Streams every parsed result row on demand; not part of the serialised model.
    history_rows: Callable[[], Iterator[dict[str, Any]]] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def failure_count(self) -> int:
        """Failures seen: Tune's own count when it has one, else the blocks found."""
        return max(self.num_failures or 0, len(self.failures))

    @property
    def iterations(self) -> int | None:
        if self.history and self.history.max_iteration is not None:
            return self.history.max_iteration
        value = self.last_result.get("training_iteration")
        return value if isinstance(value, int) else None

    @property
    def never_started(self) -> bool:
        """Ended TERMINATED without ever starting: Tune recorded no start time and no result.
        A time budget or a stopper that ends the run marks the trials still waiting for
        resources TERMINATED too (a trial that ran has a start time, reported or not)."""
        return (
            self.status == TrialStatus.TERMINATED
            and self.in_state
            and self.start_time is None
            and self.iterations is None
            and not self.last_result
            and not self.failures
        )

    @property
    def unfinished(self) -> bool:
        """Still PENDING / RUNNING / PAUSED, or ended by a stop before it started."""
        return self.status.unfinished or self.never_started

    @property
    def last_checkpoint(self) -> Checkpoint | None:
        existing = [c for c in self.checkpoints if c.exists]
        return existing[-1] if existing else None


# A line of a log's last Tune status block (trial counts, resources in use, time running):
# the scan keeps only that block, apart from the other events (scan/_logs.py).
TUNE_STATUS = "tune-status"


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class LogEvent:
    """A notable line in a log: an error line, a Tune status line, a kill notice."""

    kind: str  # e.g. "error-line", "trials-incomplete", "trial-errored", "interrupted", "signal"
    source: Evidence
    trial: str | None = None  # trial id or name when the line names one
    pid: int | None = None  # the process the line is about, when it says
    text: str = ""  # the whole line (up to 2,000 characters); `source.excerpt` is cut short

    @property
    def line(self) -> str:
        return self.text or self.source.excerpt


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """One entry of a PyTorch Flight Recorder buffer: a collective one rank called."""

    seq: int  # collective_seq_id, counted per process group
    op: str  # profiling_name, e.g. "gloo:all_reduce", "nccl:all_reduce"
    group: str  # the process group's name ("0" is the default group)
    group_desc: str  # its description, e.g. "default_pg"
    sizes: str  # input_sizes as Python prints the list, e.g. "[[4]]" (cheap, comparable)
    dtypes: str  # input_dtypes likewise, e.g. "['Float']"
    state: str  # "scheduled", "started" or "completed" (gloo leaves "scheduled")

    @property
    def signature(self) -> tuple[str, str, str]:
        """What every rank must agree on at one sequence number."""
        return self.op, self.sizes, self.dtypes

    @property
    def shown_sizes(self) -> str:
        """As a user reads them: "[[4]]" -> "[4]", "[[4], [2, 3]]" -> "[4], [2, 3]"."""
        if self.sizes in ("", "[]", "()"):
            return "none"
        return self.sizes[1:-1] if self.sizes[:2] in ("[[", "[(", "((") else self.sizes

    @property
    def shown_dtypes(self) -> str:
        """ "['Float']" -> "Float"."""
        return self.dtypes.strip("[]()").replace("'", "")

    @property
    def describe(self) -> str:
        group = f"{self.group} ({self.group_desc})" if self.group_desc else self.group
        dtypes = f", {self.shown_dtypes}" if self.shown_dtypes else ""
        return f"#{self.seq} {self.op} on process group {group}, sizes {self.shown_sizes}{dtypes}"


@dataclass
class RankDump:
    """One rank's Flight Recorder dump (JSON, or pickle read without unpickling)."""

    path: str
    rank: int | None  # from the file name, as torch names its dumps (<prefix><rank>)
    format: str  # "json" or "pickle"
    calls: list[CollectiveCall] = field(default_factory=list)  # collectives, oldest first
    group_ranks: dict[str, list[int]] = field(default_factory=dict)  # pg_config ranks
    version: str | None = None


@dataclass(frozen=True)
class RankExit:
    """A rank that ended: a torchelastic error file, torchrun's ChildFailedError report, or a
    log line saying its process died."""

    rank: int | None
    how: str  # "exception", "signal" or "exit code"
    detail: str  # e.g. "RuntimeError: ...", "SIGKILL", "exit code 1"
    source: Evidence
    time: float | None = None  # when, if the evidence says (seconds since the epoch)
    root_cause: bool = False  # torchrun's report named it the first observed failure


@dataclass
class CollectiveEvidence:
    """What says which rank a collective hang or crash came from."""

    dumps: list[RankDump] = field(default_factory=list)
    exits: list[RankExit] = field(default_factory=list)
    last_lines: dict[int, Evidence] = field(default_factory=dict)  # each rank's last log line

    def __bool__(self) -> bool:
        return bool(self.dumps or self.exits)


@dataclass(frozen=True)
class ScanError:
    """Something that could not be read, and why. Reported, never raised."""

    path: str
    reason: str
    # Where the file ends when it ends mid-write (0: empty): its writer was killed or the
    # storage filled up. None when the file is broken some other way, or whole.
    cut_off_at: int | None = None


@dataclass
class Experiment:
    path: str
    name: str
    layout: Layout
    ray_version: str | None = None
    state_file: str | None = None  # the experiment_state file that was used (newest)
    state_files: int = 0  # how many experiment_state files exist (more than one: resumed)
    start_time: float | None = None
    end_time: float | None = None
    trials: list[Trial] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)  # failures no trial could claim
    events: list[LogEvent] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)  # log files that were read
    runner: dict[str, Any] = field(default_factory=dict)  # scalar runner_data of the state
    errors: list[ScanError] = field(default_factory=list)
    # Flight Recorder dumps, rank exits and per-rank log lines (see scan/_flight_recorder.py).
    collectives: CollectiveEvidence = field(default_factory=CollectiveEvidence)
    # Trial dirs an earlier run under the same experiment name left (see scan/_tune.py): kept
    # out of `trials`, so no rule judges this run by them.
    earlier_run_dirs: list[str] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        """The experiment state lists trials and every one has finished (TERMINATED or
        ERROR): a Tune driver writes that last. False while it runs (and forever if its driver
        died), and for layouts that record no trial status (Train V2, logs)."""
        listed = [t for t in self.trials if t.in_state]
        return (
            self.state_file is not None
            and bool(listed)
            and not any(t.status.unfinished for t in listed)
        )

    def trial(self, key: str) -> Trial | None:
        """Find a trial by id or dir name."""
        for trial in self.trials:
            if key in (trial.trial_id, trial.name):
                return trial
        return None


@dataclass
class ScanResult:
    """Everything one `inspect` found under its target."""

    target: str
    layout: Layout | None  # None: nothing Ray-shaped was found
    experiments: list[Experiment] = field(default_factory=list)
    errors: list[ScanError] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C: what was read so far (errors say how far)

    @property
    def all_errors(self) -> list[ScanError]:
        return self.errors + [e for exp in self.experiments for e in exp.errors]
