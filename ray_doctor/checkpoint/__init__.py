"""verify-checkpoint: prove a checkpoint is whole, sane and safe to load, without executing it.

Every file is identified by its content (zip magic, safetensors header, pickle opcodes), never
by its name. Zip members are read whole and CRC-checked; pickles are read by a symbolic machine
that records globals and storages and calls nothing; tensor values are read from their raw
bytes only after the structure pass found the file safe and whole. Nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ray_doctor.checkpoint import _dcp, _safetensors, _torchfile, _zip
from ray_doctor.checkpoint._findings import checkpoint_findings, compare, make_finding
from ray_doctor.checkpoint._model import CheckpointResult, FileResult, Problem, Tensor
from ray_doctor.checkpoint._values import nonfinite
from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, ScanError
from ray_doctor.storage import Entry, Storage, StorageError, open_storage

MODEL_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".safetensors", ".distcp", ".tar")
MAX_FILES = 10_000  # files looked at in one checkpoint dir
MAX_DEPTH = 4
SHOWN = 8


class VerifyFailure(Exception):
    """The target cannot be read at all: exit 2."""


class RunDirGiven(Exception):
    """The target holds runs, not one checkpoint: Ray's own state files in it (tuner.pkl, the
    searcher's state) would read as unsafe pickles. `verify_all` is what it asks for."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@dataclass
class VerifyResult:
    target: str
    layout: str | None  # "checkpoint", or the experiment layout with --all; None: nothing found
    checkpoints: list[CheckpointResult] = field(default_factory=list)
    errors: list[ScanError] = field(default_factory=list)
    # (experiment, trial id, checkpoint path or None) per trial with --all
    latest_restorable: list[tuple[str | None, str | None, str | None]] = field(default_factory=list)
    dangling: list[Problem] = field(default_factory=list)
    # (checkpoint, the one it is compared with) for --against previous
    comparisons: list[tuple[CheckpointResult, CheckpointResult]] = field(default_factory=list)


def _sniff(head: bytes, size: int) -> str:
    if size == 0:
        return "empty"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    if _safetensors.looks_like(head, size):
        return "safetensors"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "pickle"
    if head[:1] in (b"(", b"c", b"}", b"]", b"I", b"N", b"S", b"V", b"F", b"L"):
        return "pickle?"  # protocol 0/1 text pickle, or just text: the parser decides
    if head.lstrip()[:1] in (b"{", b"["):
        return "json"
    return "other"


def analyse_file(storage: Storage, path: str, size: int, values: bool = True) -> FileResult:
    result = FileResult(storage.display(path), path, "other", size)
    try:
        head = storage.read_range(path, 0, 16) if size else b""
    except StorageError as exc:
        result.problem("checkpoint-corrupt", f"cannot read: {exc.reason}")
        return result
    kind = _sniff(head, size)
    model_file = path.lower().endswith(MODEL_SUFFIXES)
    if kind == "empty":
        result.format = "empty"
        if model_file:
            result.problem(
                "checkpoint-corrupt", "the file is empty (0 bytes): written but never filled"
            )
        return result
    counted = None  # NaN / Inf counts taken during the CRC pass (remote zips)
    if kind == "zip":
        result.format = "zip"
        counted = _torchfile.analyse_torch_zip(storage, result, count_values=values)
    elif kind == "safetensors":
        _safetensors.analyse(storage, result)
    elif (
        kind == "pickle"
        or (kind == "pickle?" and model_file)
        or (kind == "pickle?" and _is_pickle_name(path))
    ):
        result.format = "pickle"
        _torchfile.analyse_pickle(storage, result)
    elif model_file:
        result.problem("checkpoint-corrupt", _not_weights(storage, path, size))
    if values and not result.problems:
        _check_values(storage, result, counted)
    return result


LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def _not_weights(storage: Storage, path: str, size: int) -> str:
    """What a model file that is no checkpoint format is: the two that a download or a clone
    leaves in place of the weights are told by their first bytes."""
    try:
        head = storage.read_range(path, 0, min(size, 512))
    except StorageError:
        head = b""
    if head.startswith(LFS_POINTER):
        declared = next(
            (
                line[5:].decode("ascii", "replace")
                for line in head.splitlines()
                if line[:5] == b"size "
            ),
            None,
        )
        weights = f" ({declared} bytes)" if declared else ""
        return (
            f"a git-lfs pointer file, not the weights{weights}: they were never fetched "
            "(`git lfs pull` in the repository it came from)"
        )
    if head.lstrip()[:1] == b"<" and any(
        tag in head.lower() for tag in (b"<html", b"<!doctype html", b"<?xml", b"<head")
    ):
        return (
            "an HTML or XML page, not the weights: a download saved the server's page (a login, "
            "error or redirect page) in place of the file"
        )
    return "not a zip, safetensors or pickle file (random bytes, or a different format)"


def _is_pickle_name(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith((".pkl", ".pickle")) or name in (".tune_metadata", "_preprocessor")


def _check_values(
    storage: Storage, result: FileResult, counted: dict[int, int] | None = None
) -> None:
    """NaN / Inf per tensor: `counted` when the structure pass counted them already (by index
    in result.tensors; absent means not a counted dtype), else read here."""
    members = None
    if result.format == "torch-zip" and counted is None:
        try:
            members = {
                m.name: m for m in _zip.read_directory(storage, result.raw_path, result.size)
            }
        except (_zip.ZipError, StorageError):
            return
    bad: list[tuple[Tensor, int]] = []
    for index, tensor in enumerate(result.tensors):
        if counted is not None:
            count = counted.get(index, 0)
        else:
            try:
                count = nonfinite(storage, tensor, members)
            except (StorageError, _zip.ZipError, ValueError) as exc:
                result.problem(
                    "checkpoint-corrupt", f"tensor {tensor.name}: bytes unreadable ({exc})"
                )
                return
        if count:
            bad.append((tensor, count))
    if bad:
        listed = ", ".join(f"{t.name} ({n} of {_numel(t)})" for t, n in bad[:SHOWN])
        more = f" and {len(bad) - SHOWN} more tensors" if len(bad) > SHOWN else ""
        result.problem(
            "checkpoint-nonfinite",
            f"NaN or Inf values in {len(bad)} tensor(s): {listed}{more}",
            excerpt=f"{bad[0][0].name}: {bad[0][1]} non-finite values",
        )


def _numel(tensor: Tensor) -> int:
    count = 1
    for dim in tensor.shape:
        count *= max(0, dim)
    return count


def _list_files(storage: Storage, path: str, errors: list[ScanError]) -> list[Entry]:
    """Regular files under a checkpoint dir, a bounded number of levels and files deep."""
    found: list[Entry] = []
    frontier = [(path, 0)]
    seen: set[str] = set()
    while frontier and len(found) < MAX_FILES:
        current, depth = frontier.pop()
        try:
            entries = storage.list_dir(current)
        except StorageError as exc:
            errors.append(ScanError(exc.path, exc.reason))
            continue
        for entry in entries:
            if entry.is_file:
                found.append(entry)
            elif entry.is_dir and depth < MAX_DEPTH and entry.path not in seen:
                seen.add(entry.path)
                frontier.append((entry.path, depth + 1))
    if len(found) >= MAX_FILES:
        errors.append(ScanError(storage.display(path), f"stopped after {MAX_FILES} files"))
    return sorted(found, key=lambda e: e.path)


def _size(storage: Storage, entry: Entry) -> int:
    if entry.size is not None:
        return entry.size
    stat = storage.stat(entry.path)
    return stat.size if stat and stat.size is not None else 0


def verify_dir(
    storage: Storage, path: str, values: bool, errors: list[ScanError]
) -> CheckpointResult:
    files = _list_files(storage, path, errors)
    entries = storage.list_dir(path) if files else []
    result = CheckpointResult(storage.display(path), "dir")
    if not files:
        result.problems.append(
            Problem(
                "checkpoint-empty",
                "the checkpoint dir holds no files: nothing to restore from",
                Evidence(result.path, None, "empty directory"),
            )
        )
        return result
    if _dcp.is_dcp_dir(entries):
        result.kind = "dcp"
        shards = {e.name: _size(storage, e) for e in entries if e.name.endswith(".distcp")}
        meta = next(e for e in entries if e.name == _dcp.METADATA)
        metadata = FileResult(
            storage.display(meta.path), meta.path, "dcp-metadata", _size(storage, meta)
        )
        _dcp.analyse_dir(storage, metadata, entries, shards)
        result.files.append(metadata)
        return result
    for entry in files:
        result.files.append(analyse_file(storage, entry.path, _size(storage, entry), values))
    return result


def verify(target: str, values: bool = True) -> VerifyResult:
    """Verify one checkpoint: a file, a checkpoint dir, or a DCP dir."""
    storage, path, entry = _open(target)
    result = VerifyResult(storage.display(path), "checkpoint")
    if entry.is_dir:
        what = _run_dir(storage, path)
        if what is not None:
            raise RunDirGiven(what)
        result.checkpoints.append(verify_dir(storage, path, values, result.errors))
    elif entry.is_file:
        checkpoint = CheckpointResult(storage.display(path), "file")
        checkpoint.files.append(analyse_file(storage, path, _size(storage, entry), values))
        result.checkpoints.append(checkpoint)
    else:
        raise VerifyFailure(f"{target}: not a regular file or dir")
    return result


def verify_path(
    target: str, values: bool = True, against_previous: bool = False
) -> tuple[VerifyResult, str | None]:
    """`verify` of a checkpoint, or `verify_all` of a run dir (and what kind of run dir it is,
    for the caller to say so): what `verify-checkpoint PATH` does without `--all`."""
    try:
        return verify(target, values), None
    except RunDirGiven as given:
        return verify_all(target, values, against_previous), given.what


def _run_dir(storage: Storage, path: str) -> str | None:
    """What kind of run dir `path` is (an experiment, a trial, a storage_path), by what Ray
    writes in it; None for anything else. A trial dir needs params.json and one more of Tune's
    files beside it: a model dir may hold a params.json of its own (Llama's do)."""
    from ray_doctor.scan import experiments_below, holds_experiment

    try:
        entries = storage.list_dir(path)
    except StorageError:
        return None  # verify_dir reports it
    if holds_experiment(entries):
        return "a Ray Tune / Train experiment dir"
    names = {entry.name for entry in entries if not entry.is_dir}
    if "params.json" in names and names & {
        "result.json",
        "progress.csv",
        "params.pkl",
        "error.txt",
    }:
        return "a Tune trial dir"
    if not any(name.endswith(MODEL_SUFFIXES) for name in names) and experiments_below(
        storage, entries
    ):
        return "a dir of Ray experiments"
    return None


def verify_all(target: str, values: bool = True, against_previous: bool = False) -> VerifyResult:
    """Every checkpoint of every trial under an experiment, trial or storage dir."""
    from ray_doctor.scan import ScanFailure, scan

    try:
        scanned = scan(target)
    except ScanFailure as exc:
        raise VerifyFailure(str(exc)) from None
    storage, _, _ = _open(target)
    result = VerifyResult(scanned.target, scanned.layout.value if scanned.layout else None)
    result.errors += scanned.all_errors
    for experiment in scanned.experiments:
        for trial in experiment.trials:
            previous: CheckpointResult | None = None
            for checkpoint in trial.checkpoints:
                if not checkpoint.exists:
                    result.dangling.append(
                        Problem(
                            "snapshot-dangling",
                            f"{trial.trial_id}: {checkpoint.name} is recorded "
                            f"({_recorded_by(experiment.layout.value)}) but is not on storage",
                            Evidence(checkpoint.path, None, f"{checkpoint.name}: missing"),
                        )
                    )
                    continue
                verified = verify_dir(
                    storage, _raw_path(storage, checkpoint.path), values, result.errors
                )
                verified.trial_id, verified.experiment = trial.trial_id, experiment.name
                result.checkpoints.append(verified)
                if against_previous and previous is not None:
                    result.comparisons.append((verified, previous))
                previous = verified
    return result


def diagnose(result: VerifyResult, reference: CheckpointResult | None = None) -> list[Finding]:
    """Findings for every checkpoint, the dangling records and the comparisons; fills in the
    latest restorable checkpoint of each trial."""
    findings: list[Finding] = []
    ok: dict[tuple[str | None, str | None], str | None] = {}
    for checkpoint in result.checkpoints:
        own = checkpoint_findings(checkpoint)
        if reference is not None:
            own += compare(checkpoint, reference)
        findings += own
        key = (checkpoint.experiment, checkpoint.trial_id)
        ok.setdefault(key, None)
        if not any(f.severity == Severity.ERROR for f in own):
            ok[key] = checkpoint.path  # checkpoints come oldest first: the last one wins
    for checkpoint, previous in result.comparisons:
        findings += compare(checkpoint, previous)
    for problem in result.dangling:
        findings.append(make_finding(problem.rule, problem.message, [problem.evidence], None))
    if any(c.trial_id for c in result.checkpoints):
        result.latest_restorable = [(exp, trial, path) for (exp, trial), path in ok.items()]
    return findings


def _recorded_by(layout: str) -> str:
    if layout == "train-v2":
        return "checkpoint_manager_snapshot.json names it"
    return "result.json reported it last"


def _raw_path(storage: Storage, display: str) -> str:
    """The storage path behind a display path (the scan model keeps display paths)."""
    return storage.path_of(display)


def _open(target: str) -> tuple[Storage, str, Entry]:
    try:
        storage, path = open_storage(target)
        entry = storage.stat(path)
    except StorageError as exc:
        raise VerifyFailure(f"cannot read {exc.path}: {exc.reason}") from None
    if entry is None:
        raise VerifyFailure(f"{storage.display(path)}: {storage.why_missing(path)}")
    return storage, path, entry


__all__ = [
    "VerifyFailure",
    "VerifyResult",
    "analyse_file",
    "diagnose",
    "verify",
    "verify_all",
    "verify_dir",
]
