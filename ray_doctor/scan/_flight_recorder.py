"""Which rank: PyTorch Flight Recorder dumps, torchelastic error files, per-rank log lines.

Flight Recorder dumps (`TORCH_FR_DUMP_TEMP_FILE<rank>`, or `_dump_fr_trace[_json]` on demand)
hold each rank's last collectives. JSON is read as JSON; the pickle form (torch's default) is
read by the symbolic pickle machine of verify-checkpoint, which never imports or calls
anything: a dump is plain dicts, lists, strings and numbers, and a file that needs anything
else is reported, not loaded. Files are recognised by their content, not only their name.

torchelastic's error files (the JSON `@record` writes) and torchrun's ChildFailedError report
say which rank failed first and how; the logs say each rank's last line.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from ray_doctor.model import (
    CollectiveCall,
    CollectiveEvidence,
    Evidence,
    Experiment,
    RankDump,
    RankExit,
    ScanError,
)
from ray_doctor.scan._logs import DEDUP_SUFFIX, WORKER_PREFIX
from ray_doctor.scan._traceback import strip_ansi
from ray_doctor.storage import Entry, Storage, StorageError, open_storage

MAX_DUMP_BYTES = 256 * 1024 * 1024
MAX_DUMP_FILES = 4096  # dump-like files read below one dir
MAX_DUMP_DEPTH = 4  # levels looked into below a dir given for dumps
MAX_DUMP_DIRS = 200  # dirs listed there, at most
# torch names a dump <prefix><rank> (e.g. nccl_trace_rank_3); JSON copies often add .json.
DUMP_NAME = re.compile(r"(?P<rank>\d+)(?:\.json|\.pkl|\.pickle)?$")
DUMP_LIKE_NAME = re.compile(r"(?i)(?:rank|trace|fr|dump)[\w.-]*?\d+(?:\.json|\.pkl|\.pickle)?$")
ERROR_FILE_NAME = re.compile(r"(?:^|_)error\.json$|^error_file")
LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".csv", ".pt", ".pth", ".safetensors")
HEAD_BYTES = 4096
# A JSON dump's or error file's first keys (torch writes them sorted; @record writes "message").
JSON_KEYS = re.compile(rb'"(?:entries|pg_config|comm_lib_version|version|message)"\s*:')
PICKLE_PROTOCOLS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
PLAIN = (dict, list, tuple, str, int, float, bool, type(None), bytes)

# torchrun's ChildFailedError report ("Root Cause (first observed failure):" section).
ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\)")
REPORT_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")
REPORT_RANK = re.compile(r"(-?\d+)(?: \(local_rank: (\d+)\))?")
REPORT_EXIT = re.compile(r"(-?\d+)(?: \(pid: (\d+)\))?\s*(\S*)")
# Ray Train V2's controller lists its workers: "- (ip=10.0.0.1, pid=123) world_rank=1, ..."
WORKER_RANK = re.compile(r"\(ip=[^,]*, pid=(?P<pid>\d+)\) world_rank=(?P<rank>\d+)")
TORCH_RANK_PREFIX = re.compile(r"^\[rank(?P<rank>\d+)\]:")
# Ray's word that a worker process died, and how.
RAY_WORKER_DIED = re.compile(
    r"(?:A worker died or was killed while executing|The actor died unexpectedly|"
    r"Worker unexpectedly exits|killed by (?:signal|SIGKILL)|exit(?:ed)? with (?:signal|code)|"
    r"\*\*\* SIG[A-Z]+ received at time=)"
)
PID_IN_TEXT = re.compile(r"(?i)\bpid[=: ]+(\d+)")
# Only where the text says the process got the signal: Ray's "common causes" name others.
SIGNAL_NAME = re.compile(r"(?:killed by |\*\*\* )(SIG[A-Z]+)|\b[Ss]ignal (\d+)")
EXIT_DETAIL = re.compile(r"Worker exit detail: (.*?)\.(?: |$)")
# What a dying process prints after its real last line: crash handlers' stacks and lists.
CRASH_NOISE = re.compile(
    r"^(?:Extension modules:|Fatal Python error|\*\*\* SIG|PC: @|\s*@\s+0x|Stack \(most recent|"
    r"\s*File \"<|.*\+0x[0-9a-f]+\) \[0x|\[[\d\- :,]+ [EF] \d+ \d+\] logging\.cc:\d+: (?!Unhandled))"
)
# A native abort's reason (a gloo/NCCL enforce, std::terminate), said before the signal.
ABORT_REASON = re.compile(
    r"(?:Unhandled exception: \S+ what\(\): |terminate called after .*?what\(\): )(.*)"
)
MAX_DETAIL = 200
SIGNALS = {"9": "SIGKILL", "15": "SIGTERM", "6": "SIGABRT", "11": "SIGSEGV", "7": "SIGBUS"}


def dump_rank(name: str) -> int | None:
    match = DUMP_NAME.search(name)
    return int(match["rank"]) if match else None


def could_be_evidence(entry: Entry) -> bool:
    """A file worth sniffing: named like a dump (torch's default nccl_trace_rank_<N>, or any
    <prefix><rank> whose prefix says rank, trace, fr or dump) or like an error file."""
    if not entry.is_file or entry.name.endswith(LOG_SUFFIXES):
        return False
    return bool(DUMP_LIKE_NAME.search(entry.name) or ERROR_FILE_NAME.search(entry.name))


def read_evidence_file(storage: Storage, entry: Entry) -> RankDump | RankExit | ScanError | None:
    """A dump, an error file, a reason it cannot be read, or None when it is neither."""
    shown = storage.display(entry.path)
    try:
        head = storage.read_range(entry.path, 0, HEAD_BYTES)
        if not (head[:2] in PICKLE_PROTOCOLS or (head.startswith(b"{") and JSON_KEYS.search(head))):
            return None
        data = storage.read_bytes(entry.path, MAX_DUMP_BYTES)
    except StorageError as exc:
        return ScanError(exc.path, exc.reason)
    if data.startswith(b"{"):
        try:
            root = json.loads(data)
        except (ValueError, RecursionError) as exc:
            if DUMP_NAME.search(entry.name) and entry.name.endswith(".json"):
                return ScanError(shown, f"not valid JSON ({exc})")
            return None
        return from_json(root, shown, entry.name)
    return _from_pickle(data, shown, entry.name)


def from_json(root: Any, shown: str, name: str) -> RankDump | RankExit | None:
    """A parsed JSON dump or error file; `name` is the file name torch gave it (the rank)."""
    if isinstance(root, dict) and isinstance(root.get("entries"), list):
        return _dump(root, shown, name, "json")
    if isinstance(root, dict) and "message" in root:
        return _error_file(root, shown, name)
    return None


def _from_pickle(data: bytes, shown: str, name: str) -> RankDump | ScanError | None:
    # Imported here: the checkpoint package costs every `inspect` ~35 ms to import, and only a
    # pickled dump needs its pickle machine.
    from ray_doctor.checkpoint._pickle import PickleError, analyse

    try:
        info = analyse(data)  # safe: symbolic pickle machine, nothing is imported or called
    except PickleError as exc:
        return ScanError(shown, f"a pickle named like a Flight Recorder dump is malformed ({exc})")
    if info.globals or info.persistent or not _plain(info.root):
        needs = sorted({ref.dotted for ref, _ in info.globals}) or ["objects it would build"]
        return ScanError(
            shown,
            "not a plain Flight Recorder dump: this pickle would import or call "
            f"{', '.join(needs[:5])}; reported, not loaded",
        )
    if isinstance(info.root, dict) and isinstance(info.root.get("entries"), list):
        return _dump(info.root, shown, name, "pickle")
    return None


def _plain(value: Any) -> bool:
    """Only containers, strings and numbers, all the way down (iteratively: dumps are big)."""
    from ray_doctor.checkpoint._pickle import Global, Obj, Persistent

    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (Global, Obj, Persistent)) or not isinstance(item, PLAIN):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
            stack.extend(item.keys())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _dump(root: dict, shown: str, name: str, fmt: str) -> RankDump:
    calls = []
    groups: dict[Any, tuple[str, str]] = {}  # a dump names few groups: convert each once
    for entry in root["entries"]:
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue  # point-to-point ops have their own sequence (p2p_seq_id)
        seq = entry.get("collective_seq_id")
        if not isinstance(seq, int):
            seq = _int(seq)
        if not seq:
            continue
        group = entry.get("process_group")
        key = tuple(group) if isinstance(group, (list, tuple)) else group
        if key not in groups:
            groups[key] = _group(group)
        calls.append(
            CollectiveCall(
                seq,
                str(entry.get("profiling_name") or "unknown op"),
                *groups[key],
                str(entry.get("input_sizes", "")),
                str(entry.get("input_dtypes", "")),
                str(entry.get("state") or ""),
            )
        )
    group_ranks: dict[str, list[int]] = {}
    config = root.get("pg_config")
    if isinstance(config, dict):
        for key, value in config.items():
            ranks = value.get("ranks") if isinstance(value, dict) else None
            if isinstance(ranks, str):
                ranks = [int(r) for r in re.findall(r"\d+", ranks)]
            if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
                group_ranks[str(key)] = ranks
    version = root.get("version")
    return RankDump(
        shown, dump_rank(name), fmt, calls, group_ranks, str(version) if version else None
    )


def _group(group: Any) -> tuple[str, str]:
    """(name, description) of an entry's process_group ["0", "default_pg"]."""
    if isinstance(group, (list, tuple)) and len(group) >= 2:
        return str(group[0]), str(group[1])
    return ("", "") if group is None else (str(group), "")


def _error_file(root: dict, shown: str, name: str) -> RankExit:
    """torchelastic's error file: {"message": {"message": "Type: text", "extraInfo": {...}}}."""
    message = root.get("message")
    when = None
    if isinstance(message, dict):
        extra = message.get("extraInfo") if isinstance(message.get("extraInfo"), dict) else {}
        when = _int(extra.get("timestamp"))
        message = message.get("message")
    detail = str(message or "error file without a message").strip().splitlines()[0]
    # torchelastic writes <run dir>/attempt_<n>/<local rank>/error.json
    parent = shown.rstrip("/").rsplit("/", 2)
    rank = dump_rank(parent[-2]) if len(parent) == 3 and parent[-2].isdigit() else None
    return RankExit(
        rank, "exception", detail, Evidence(shown, 1, detail), float(when) if when else None
    )


def read_evidence_dir(storage: Storage, path: str) -> tuple[CollectiveEvidence, list[ScanError]]:
    """Dumps and error files in a dir and the dirs below it, a few levels deep (a logs dir's
    fr_dumps/, torchrun's <log dir>/<run id>/attempt_0/<local rank>/error.json)."""
    evidence = CollectiveEvidence()
    errors: list[ScanError] = []
    candidates: list[Entry] = []
    frontier, listed = [path], 0
    for _depth in range(MAX_DUMP_DEPTH):
        below: list[str] = []
        for folder in frontier:
            if listed >= MAX_DUMP_DIRS:
                break
            listed += 1
            try:
                entries = storage.list_dir(folder)
            except StorageError as exc:
                if folder == path:
                    errors.append(ScanError(exc.path, exc.reason))
                continue
            candidates += [e for e in entries if could_be_evidence(e)]
            below += [e.path for e in entries if e.is_dir]
        frontier = below
    for entry in candidates[:MAX_DUMP_FILES]:
        _add(evidence, errors, read_evidence_file(storage, entry))
    return evidence, errors


def read_evidence(storage: Storage, entry: Entry) -> tuple[CollectiveEvidence, list[ScanError]]:
    """One file given on its own (a dump, an error file): empty when it is neither."""
    evidence = CollectiveEvidence()
    errors: list[ScanError] = []
    _add(evidence, errors, read_evidence_file(storage, entry))
    return evidence, errors


def _add(evidence: CollectiveEvidence, errors: list[ScanError], found: object) -> None:
    if isinstance(found, RankDump):
        evidence.dumps.append(found)
    elif isinstance(found, RankExit):
        evidence.exits.append(found)
    elif isinstance(found, ScanError):
        errors.append(found)


def merge_evidence(experiment: Experiment, evidence: CollectiveEvidence) -> None:
    """Add dumps and exits to an experiment (a rank's JSON and pickle copies are both kept;
    the analysis reads one dump per rank)."""
    experiment.collectives.dumps += evidence.dumps
    experiment.collectives.exits += evidence.exits


# --------------------------- what the logs say about each rank ---------------------------


def read_rank_logs(experiment: Experiment) -> None:
    """Each rank's last log line, and ranks the logs say died (torchrun's report, Ray's
    word that a worker was killed). Only read when there is collective evidence to explain."""
    ranks_by_pid: dict[int, int] = {}
    last_by_pid: dict[int, Evidence] = {}
    last_lines = experiment.collectives.last_lines
    died_pids: list[tuple[int | None, Evidence, str]] = []
    abort_reasons: dict[int, str] = {}
    for path in experiment.logs:
        report = _TorchrunReport(path)
        try:
            storage, real = open_storage(path)
            for lineno, raw in enumerate(storage.iter_lines(real), start=1):
                line = strip_ansi(raw.decode("utf-8", "replace")).rstrip()
                if line.startswith("{"):
                    _json_rank_line(line, path, lineno, last_lines)
                    continue
                _text_rank_line(line, path, lineno, ranks_by_pid, last_by_pid, last_lines)
                report.feed(line, lineno)
                reason = ABORT_REASON.search(line)
                if reason and _dead_pid(line) is not None:
                    abort_reasons[_dead_pid(line)] = _abort_reason(reason[1])
                if RAY_WORKER_DIED.search(line):
                    died_pids.append((_dead_pid(line), Evidence(path, lineno, line), line))
        except StorageError as exc:
            experiment.errors.append(ScanError(exc.path, exc.reason))
        experiment.collectives.exits += report.finish()
    for pid, evidence in last_by_pid.items():
        rank = ranks_by_pid.get(pid)
        if rank is not None and rank not in last_lines:
            last_lines[rank] = evidence
    known = {e.rank for e in experiment.collectives.exits}
    for pid, evidence, line in died_pids:
        rank = ranks_by_pid.get(pid) if pid is not None else None
        if rank is None or rank in known:
            continue
        known.add(rank)
        signal = _signal(line)
        if signal:
            how, detail = "signal", signal
            if pid in abort_reasons:
                detail += f" after {abort_reasons[pid]}"
        else:
            said = EXIT_DETAIL.search(line)
            how, detail = "exit code", said[1] if said else "its process died"
        experiment.collectives.exits.append(RankExit(rank, how, detail, evidence))


def _dead_pid(line: str) -> int | None:
    """The process a death notice is about: one it names, else the worker that printed it."""
    prefix = WORKER_PREFIX.match(line)
    match = PID_IN_TEXT.search(line[prefix.end() :] if prefix else line)
    if match:
        return int(match[1])
    if prefix and "RayTrainWorker" in prefix["actor"]:
        return int(prefix["pid"])
    return None


def _signal(line: str) -> str | None:
    match = SIGNAL_NAME.search(line)
    if not match:
        return None
    return match[1] or SIGNALS.get(match[2], f"signal {match[2]}")


def _abort_reason(text: str) -> str:
    """gloo's "[enforce fail at file:line] cond. 8 vs 4. Reason." as "cond. 8 vs 4. Reason."."""
    text = re.sub(r"^\[enforce fail at [^\]]*\]\s*", "", text.strip())
    text = re.split(r" /\S", text, maxsplit=1)[0]  # the native stack trace that follows
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


def _json_rank_line(line: str, path: str, lineno: int, last_lines: dict[int, Evidence]) -> None:
    """Ray Train V2's train/*.log: one JSON record per line, with the worker's world_rank."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return
    if not isinstance(record, dict):
        return
    rank = record.get("world_rank")
    message = str(record.get("message") or "").strip()
    if isinstance(rank, int) and message:
        last_lines[rank] = Evidence(path, lineno, message)


def _text_rank_line(
    line: str,
    path: str,
    lineno: int,
    ranks_by_pid: dict[int, int],
    last_by_pid: dict[int, Evidence],
    last_lines: dict[int, Evidence],
) -> None:
    mapping = WORKER_RANK.search(line)
    if mapping:
        ranks_by_pid[int(mapping["pid"])] = int(mapping["rank"])
    prefix = WORKER_PREFIX.match(line)
    text = line[prefix.end() :] if prefix else line
    if not text.strip() or DEDUP_SUFFIX.search(text) or CRASH_NOISE.match(text):
        return  # Ray's deduplicated repeats arrive late and out of order; crash handler output
    torch_rank = TORCH_RANK_PREFIX.match(text)
    if torch_rank:
        last_lines[int(torch_rank["rank"])] = Evidence(path, lineno, text)
    elif prefix and "RayTrainWorker" in prefix["actor"]:
        last_by_pid[int(prefix["pid"])] = Evidence(path, lineno, text)


class _TorchrunReport:
    """The root cause torchrun's ChildFailedError report names (the first rank that failed)."""

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.exits: list[RankExit] = []
        self.fields: dict[str, tuple[str, int]] = {}
        self.in_root = False

    def feed(self, line: str, lineno: int) -> None:
        if ROOT_CAUSE.search(line):
            self.in_root, self.fields = True, {}
            return
        if not self.in_root:
            return
        match = REPORT_FIELD.match(line)
        if match:
            self.fields[match[1]] = (match[2].strip(), lineno)
        elif self.fields and (line.startswith("=") or not line.strip()):
            self.finish()
        elif "traceback" in self.fields:
            # A multi-line traceback: its last line is the exception.
            self.fields["traceback"] = (line.strip(), lineno)

    def finish(self) -> list[RankExit]:
        if self.in_root and self.fields:
            self.exits.append(_report_exit(self.fields, self.shown))
        self.in_root, self.fields = False, {}
        return self.exits


def _report_exit(fields: dict[str, tuple[str, int]], shown: str) -> RankExit:
    rank_text, rank_line = fields.get("rank", ("", None))
    rank_match = REPORT_RANK.match(rank_text)
    exit_text, _ = fields.get("exitcode", ("", None))
    exit_match = REPORT_EXIT.match(exit_text)
    traceback_text = fields.get("traceback", ("", None))[0]
    code = int(exit_match[1]) if exit_match else None
    if code is not None and code < 0:
        how, detail = "signal", exit_match[3] or SIGNALS.get(str(-code), f"signal {-code}")
    elif (
        traceback_text and traceback_text != "<N/A>" and "To enable traceback" not in traceback_text
    ):
        how, detail = "exception", traceback_text
    else:
        how, detail = "exit code", f"exit code {code}"
    when = None
    time_text = fields.get("time", ("", None))[0]
    with contextlib.suppress(ValueError):
        when = datetime.strptime(time_text, "%Y-%m-%d_%H:%M:%S").timestamp()
    excerpt = f"rank {rank_text}; exitcode {exit_text}; {traceback_text}".strip("; ")
    return RankExit(
        int(rank_match[1]) if rank_match else None,
        how,
        detail,
        Evidence(shown, rank_line, excerpt),
        when,
        root_cause=True,
    )


def attach(experiments: Iterable[Experiment]) -> None:
    """Read the per-rank logs of experiments with dumps or exits to explain, or whose logs
    hold torchrun's report."""
    for experiment in experiments:
        torchrun = any(f.exc_type == "ChildFailedError" for f in _all_failures(experiment)) or any(
            "Root Cause (first observed failure)" in e.line for e in experiment.events
        )
        if experiment.collectives or torchrun:
            read_rank_logs(experiment)


def _all_failures(experiment: Experiment) -> Iterator:
    yield from experiment.failures
    for trial in experiment.trials:
        yield from trial.failures
