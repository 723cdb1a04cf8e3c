"""experiment_state-<ts>.json, streamed one trial at a time.

The file is real JSON (with NaN / Infinity literals): `{"trial_data": [[trial_json,
run_metadata_json], ...], "runner_data": {...}, "stats": {...}}`, each pair holding two JSON
strings nested in the JSON. Ray before ~2.5 wrote `"checkpoints": [trial_json, ...]` instead.
A 10,000-trial sweep makes this file hundreds of MB, so trials are decoded one by one and
only the fields the model needs are kept. Pickled blobs (CLOUDPICKLE_FALLBACK, hex strings)
are left opaque: never decoded.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ray_doctor.storage import Storage

TRIAL_LIST_KEYS = ("trial_data", "checkpoints")
PICKLED = "<pickled object>"
_WS = " \t\r\n"


class StateError(Exception):
    """The state file is not the JSON Ray writes; `reason` says where it broke."""


@dataclass
class TrialRecord:
    """One trial as the experiment state describes it (a subset of Trial's JSON state)."""

    trial_id: str
    status: str | None
    relative_logdir: str | None
    config: dict[str, Any]
    max_failures: int | None
    num_failures: int | None
    start_time: float | None
    last_result_time: float | None
    last_result: dict[str, Any]
    error_filename: str | None
    trainable_name: str | None


@dataclass
class StateFile:
    format: str  # "trial_data" (Ray >= ~2.5) or "checkpoints" (older)
    runner: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


def opaque(value: Any) -> Any:
    """Replace Ray's pickled fallbacks with a marker, recursively."""
    if isinstance(value, dict):
        if value.get("_type") == "CLOUDPICKLE_FALLBACK":
            return PICKLED
        return {k: opaque(v) for k, v in value.items()}
    if isinstance(value, list):
        return [opaque(v) for v in value]
    return value


# Tune's stoppers, by class name: the runner keeps its stopper as a pickle. Its class name is
# read from the bytes (a string in the pickle), never by unpickling.
STOPPER_NAMES = re.compile(
    rb"(TimeoutStopper|MaximumIterationStopper|TrialPlateauStopper|ExperimentPlateauStopper|"
    rb"CombinedStopper|FunctionStopper|NoopStopper)"
)


CUSTOM_STOP_ALL = "custom stop_all"


def pickled_class_names(value: Any) -> list[str]:
    """The known stopper classes named inside a CLOUDPICKLE_FALLBACK value (hex pickle)."""
    if not (isinstance(value, dict) and value.get("_type") == "CLOUDPICKLE_FALLBACK"):
        return []
    try:
        raw = bytes.fromhex(str(value.get("value", "")))
    except ValueError:
        return []
    names = {m.decode() for m in STOPPER_NAMES.findall(raw)}
    # A class of the user's travels by value (as a _make_skeleton_class call) with its
    # methods' names: one with its own stop_all can end the whole experiment.
    if b"_make_skeleton_class" in raw and b"stop_all" in raw:
        names.add(CUSTOM_STOP_ALL)
    return sorted(names)


def _runner_items(data: dict[str, Any]) -> dict[str, Any]:
    items = _scalar_items(data)
    stoppers = pickled_class_names(data.get("_stopper"))
    if stoppers:
        items["_stopper_classes"] = ",".join(stoppers)
    return items


def _scalar_items(data: dict[str, Any]) -> dict[str, Any]:
    # Keys interned: thousands of trials share one copy of each result key.
    return {
        sys.intern(k): v
        for k, v in data.items()
        if v is None or isinstance(v, (str, int, float, bool))
    }


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return {}
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


# Ray writes run metadata with these keys first and the bulky ones (metric_analysis,
# metric_n_steps, the pickled checkpoint manager) after; the head is all the model needs.
META_TAIL_KEY = ', "metric_analysis": '
META_KEYS = {"start_time", "num_failures", "last_result", "last_result_time"}


def _run_metadata(value: Any) -> dict[str, Any]:
    """Decode only the head of the run-metadata JSON string when its layout allows."""
    if isinstance(value, str):
        cut = value.find(META_TAIL_KEY)
        if cut > 0:
            try:
                head = json.loads(value[:cut] + "}")
            except (ValueError, RecursionError):
                head = None
            if isinstance(head, dict) and head.keys() >= META_KEYS:
                return head
    return _as_dict(value)


def trial_json(element: Any) -> dict[str, Any]:
    """The trial's own JSON state from one element of trial_data or of checkpoints."""
    if isinstance(element, list) and element:
        return _as_dict(element[0])
    return _as_dict(element)


def trial_record(element: Any) -> TrialRecord | None:
    """Decode one element of trial_data (a pair) or of the old checkpoints list (a string)."""
    trial = trial_json(element)
    meta = _run_metadata(element[1]) if isinstance(element, list) and len(element) > 1 else {}
    trial_id = trial.get("trial_id")
    if not isinstance(trial_id, str):
        return None
    # Before run_metadata existed (Ray < 2.7), these lived on the trial itself, some under
    # other names.
    source = meta or trial
    last_result = source.get("last_result", source.get("_last_result"))
    last_time = source.get("last_result_time", source.get("last_update_time"))
    error_file = source.get("error_filename", source.get("error_file"))
    relative = trial.get("relative_logdir")
    if not isinstance(relative, str) and isinstance(trial.get("logdir"), str):
        relative = trial["logdir"].rstrip("/").rsplit("/", 1)[-1]
    return TrialRecord(
        trial_id=trial_id,
        status=trial.get("status") if isinstance(trial.get("status"), str) else None,
        relative_logdir=relative if isinstance(relative, str) else None,
        config=opaque(trial.get("config")) if isinstance(trial.get("config"), dict) else {},
        max_failures=_int(trial.get("max_failures")),
        num_failures=_int(source.get("num_failures")),
        start_time=_float(source.get("start_time")),
        last_result_time=_float(last_time),
        last_result=_scalar_items(last_result) if isinstance(last_result, dict) else {},
        error_filename=error_file.rsplit("/", 1)[-1] if isinstance(error_file, str) else None,
        trainable_name=trial.get("trainable_name")
        if isinstance(trial.get("trainable_name"), str)
        else None,
    )


class _Reader:
    """A forward-only JSON tokenizer over a chunked text stream."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        self._decoder = json.JSONDecoder()
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.consumed = 0  # characters dropped from the front of buf

    def _more(self) -> bool:
        if self.eof:
            return False
        chunk = next(self._chunks, None)
        if chunk is None:
            self.eof = True
            self.buf += self._decode(b"", final=True)
            return False
        if self.pos > 65536:
            self.consumed += self.pos
            self.buf = self.buf[self.pos :]
            self.pos = 0
        self.buf += self._decode(chunk)
        return True

    def peek(self) -> str:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def expect(self, char: str) -> None:
        got = self.peek()
        if got != char:
            self.fail(
                f"expected {char!r}, found {got!r}" if got else f"expected {char!r}, file ends"
            )
        self.pos += 1

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                value, end = self._decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                # Incomplete in the buffer, or really broken: read more before deciding.
                if self._more():
                    continue
                self.fail(exc.msg)
            except RecursionError:  # nested deeper than the interpreter's stack
                self.fail("JSON nested too deep")
            # A number at the very end of the buffer may continue in the next chunk.
            if end >= len(self.buf) and not self.eof and self._more():
                continue
            self.pos = end
            return value

    def fail(self, reason: str) -> None:
        raise StateError(f"{reason} at character {self.consumed + self.pos}")


# Below this size a state file is decoded in one call (faster); above it, streamed (flat memory).
WHOLE_FILE_LIMIT = 32 * 1024 * 1024


def _read_whole(storage: Storage, path: str) -> tuple[StateFile, Iterator[Any]]:
    try:
        data = json.loads(storage.read_bytes(path, WHOLE_FILE_LIMIT))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise StateError(str(exc)) from None
    if not isinstance(data, dict):
        raise StateError("not a JSON object")
    key = next((k for k in TRIAL_LIST_KEYS if isinstance(data.get(k), list)), None)
    if key is None:
        raise StateError("no trial_data or checkpoints list")
    runner, stats = data.get("runner_data"), data.get("stats")
    state = StateFile(
        format=key,
        runner=_runner_items(runner) if isinstance(runner, dict) else {},
        stats=_scalar_items(stats) if isinstance(stats, dict) else {},
    )
    elements = data[key]
    del data
    return state, iter(elements)


def read_state(
    storage: Storage, path: str, size: int | None = None
) -> tuple[StateFile, Iterator[TrialRecord]]:
    """Read the header fields and stream the trials. Raises StateError / StorageError.

    `size`: the file's size when a listing gave it (saves a request on object stores).
    Trial records come from a generator: consume it fully before trusting `runner`/`stats`
    (they may follow the trial list in the file).
    """
    state, elements = read_state_elements(storage, path, size)
    return state, (r for r in map(trial_record, elements) if r is not None)


def read_state_elements(
    storage: Storage, path: str, size: int | None = None
) -> tuple[StateFile, Iterator[Any]]:
    """Like `read_state`, but the trials as Ray wrote them: `[trial_json, run_metadata_json]`
    pairs (or, before Ray ~2.5, trial JSON strings), undecoded."""
    if size is None:
        entry = storage.stat(path)
        size = entry.size if entry is not None else None
    if size is not None and size <= WHOLE_FILE_LIMIT:
        return _read_whole(storage, path)
    reader = _Reader(storage.iter_chunks(path))
    state = StateFile(format="unknown")

    def trials() -> Iterator[Any]:
        reader.expect("{")
        if reader.peek() == "}":
            return
        while True:
            key = reader.value()
            if not isinstance(key, str):
                reader.fail("expected an object key")
            reader.expect(":")
            if key in TRIAL_LIST_KEYS and reader.peek() == "[":
                state.format = key
                reader.expect("[")
                if reader.peek() == "]":
                    reader.pos += 1
                else:
                    while True:
                        yield reader.value()
                        sep = reader.peek()
                        reader.pos += 1
                        if sep == "]":
                            break
                        if sep != ",":
                            reader.fail(f"expected ',' or ']' in {key}, found {sep!r}")
            else:
                value = reader.value()
                if key == "runner_data" and isinstance(value, dict):
                    state.runner = _runner_items(value)
                elif key == "stats" and isinstance(value, dict):
                    state.stats = _scalar_items(value)
            sep = reader.peek()
            reader.pos += 1
            if sep == "}":
                break
            if sep != ",":
                reader.fail(f"expected ',' or '}}' after {key!r}, found {sep!r}")
        if state.format == "unknown":
            raise StateError("no trial_data or checkpoints list")

    return state, trials()
