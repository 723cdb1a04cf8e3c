"""result.json in one streaming pass, without parsing every line.

Parsing each JSON line costs more than inspect's whole time budget on a large sweep (see
bench/), so the facts rules need are found in the bytes: rows are newlines, restarts are
`"iterations_since_restore": 1`, non-finite values are `NaN` / `Infinity` tokens, checkpoints
are `"checkpoint_dir_name": "..."`. Only the first and last rows and the rows those searches
hit are parsed. Memory is bounded by the chunk size, whatever the file size.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from ray_doctor.model import History, NonFinite, Restart
from ray_doctor.storage import Storage, StorageError

# json.dumps writes `"key": 1,` (or `1}` for the last key); searching for the bare `1` would
# also stop at 10-19, 100-199, ...
RESTART_KEYS = (b'"iterations_since_restore": 1,', b'"iterations_since_restore": 1}')
CHECKPOINT_KEY = b'"checkpoint_dir_name": "'
NONFINITE = re.compile(rb"NaN|Infinity")
CHECKPOINT = re.compile(rb'"checkpoint_dir_name": "([^"\\]{1,200})"')
ITERATION = re.compile(rb'"training_iteration": (\d+)')
TIMESTAMP = re.compile(rb'"timestamp": (\d+(?:\.\d+)?)')
SINCE_RESTORE = re.compile(rb'"iterations_since_restore": (\d+)')
MAX_NONFINITE_PARSES = 20  # rows parsed to name the metrics that went non-finite
MAX_BAD_LINES = 20  # bad lines recorded by number (all are counted)
MAX_LINE = 16 * 1024 * 1024
MAX_RESTARTS = 200  # restarts kept with their position (all are counted)


def _loads(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def scalars(row: dict[str, Any]) -> dict[str, Any]:
    """The row's top-level scalar values: what reports show, without config or nested blobs."""
    # Keys are interned: 10,000 trials share one copy of "training_iteration", not 10,000.
    return {
        sys.intern(key): value
        for key, value in row.items()
        if key != "config" and (value is None or isinstance(value, (str, int, float, bool)))
    }


def last_row(history: History) -> dict[str, Any]:
    """The scalar values of the last result row (parsed on demand)."""
    if history.last_row is not None:
        return history.last_row
    row = _loads(history.last_line) if history.last_line else None
    return scalars(row) if row is not None else {}


def nonfinite_metrics(row: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(metric, "NaN" | "Infinity" | "-Infinity") for each non-finite number, config excluded."""
    for key, value in row.items():
        if not prefix and key == "config":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, float) and not math.isfinite(value):
            yield name, "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        elif isinstance(value, dict):
            yield from nonfinite_metrics(value, f"{name}/")


def _newlines(buf: bytes) -> int:
    """How many b"\\n" are in `buf`. bytes.replace of one byte runs on memchr and memcpy, about
    six times faster than bytes.count here, and this is the one pass every file needs."""
    return len(buf) - len(buf.replace(b"\n", b""))


def _may_hold(buf: bytes, token: bytes, probes: int = 32) -> bool:
    """Whether `token` occurs in `buf`. Searching for its first byte alone uses memchr (tens of
    GB/s, against ~1 GB/s for a multi-byte search), and "N" and "I" are rare in result rows."""
    pos = buf.find(token[:1])
    for _ in range(probes):
        if pos < 0:
            return False
        if buf.startswith(token, pos):
            return True
        pos = buf.find(token[:1], pos + 1)
    return pos >= 0 and token in buf[pos:]


class _LineIndex:
    """Line numbers of increasing positions in a buffer, counting each newline once."""

    def __init__(self, buf: bytes, lines_before: int) -> None:
        self.buf = buf
        self.pos = 0
        self.line = lines_before + 1

    def at(self, pos: int) -> tuple[int, bytes, int]:
        """(1-based line number, line bytes, line start) of the byte at `pos` (>= last pos)."""
        buf = self.buf
        start = buf.rfind(b"\n", 0, pos) + 1
        if start >= self.pos:
            self.line += buf.count(b"\n", self.pos, start)
        else:
            self.line -= buf.count(b"\n", start, self.pos)
        self.pos = start
        end = buf.find(b"\n", pos)
        return self.line, buf[start:end], start


class _Summarizer:
    """Accumulates a History over chunks that each end at a line boundary."""

    def __init__(self, path: str, checkpoints_wanted: Iterable[str] = ()) -> None:
        self.history = History(path=path)
        self.checkpoints_wanted = tuple(checkpoints_wanted)
        self.lines_before = 0  # lines (newlines) before the current chunk
        self.prev_line: bytes | None = None  # the last complete line seen so far
        self.nonfinite_parses = 0
        self.nonfinite: dict[str, NonFinite] = {}
        self.last_good: bytes | None = None

    def feed(self, buf: bytes) -> None:
        """`buf` holds whole lines, each ending with b"\\n"."""
        history = self.history
        count = _newlines(buf)
        if self.lines_before == 0 and count:
            first = buf[: buf.index(b"\n")]
            iteration, timestamp = ITERATION.search(first), TIMESTAMP.search(first)
            history.first_iteration = int(iteration[1]) if iteration else None
            history.first_time = float(timestamp[1]) if timestamp else None
        end = len(buf) - 1
        last_line = buf[buf.rfind(b"\n", 0, end) + 1 : end]
        # iterations_since_restore counts rows since the last (re)start. When the last row's
        # count equals the lines so far, every line is a row and nothing restarted: the
        # line check and the restart search (the two costly passes) can be skipped.
        since = SINCE_RESTORE.search(last_line)
        lines_so_far = history.rows + count
        if since and int(since[1]) == lines_so_far and history.restart_count == 0:
            history.rows = lines_so_far
        else:
            # Every JSON row ends with "}\n"; only when some line does not is it worth splitting.
            history.rows += count if buf.count(b"}\n") == count else self._check_lines(buf)
            self._scan_restarts(buf)
        if _may_hold(buf, b"NaN") or _may_hold(buf, b"Infinity"):
            self._scan_nonfinite(buf)
        if self.checkpoints_wanted or CHECKPOINT_KEY in buf:
            self._scan_checkpoints(buf)
        self.prev_line = last_line
        if last_line.strip():
            self.last_good = last_line
        self.lines_before += count

    def _check_lines(self, buf: bytes) -> int:
        """Record the lines that are not JSON objects; return how many lines are not empty."""
        rows = 0
        for offset, line in enumerate(buf.split(b"\n")[:-1]):
            stripped = line.strip()
            if not stripped:
                continue
            rows += 1
            if stripped.startswith(b"{") and stripped.endswith(b"}") and b"\x00" not in line:
                continue
            if _loads(stripped) is None:
                self._bad(self.lines_before + offset + 1)
        return rows

    def _bad(self, lineno: int) -> None:
        if len(self.history.bad_lines) < MAX_BAD_LINES:
            self.history.bad_lines.append(lineno)

    def _scan_nonfinite(self, buf: bytes) -> None:
        index = _LineIndex(buf, self.lines_before)
        pos = 0
        while True:
            match = NONFINITE.search(buf, pos)
            if not match:
                return
            lineno, line, start = index.at(match.start())
            pos = start + len(line) + 1
            if self.nonfinite_parses >= MAX_NONFINITE_PARSES:
                self.history.nonfinite_rows += 1
                continue
            self.nonfinite_parses += 1
            row = _loads(line)
            if row is None:
                continue
            found = list(nonfinite_metrics(row))
            if not found:
                continue  # the token was inside a string
            self.history.nonfinite_rows += 1
            iteration = _int(row.get("training_iteration"))
            for metric, value in found:
                seen = self.nonfinite.get(metric)
                if seen is None:
                    self.nonfinite[metric] = NonFinite(metric, value, lineno, iteration, 1)
                else:
                    self.nonfinite[metric] = NonFinite(
                        metric, seen.value, seen.first_line, seen.first_iteration, seen.rows + 1
                    )

    def _scan_restarts(self, buf: bytes) -> None:
        positions = []
        for key in RESTART_KEYS:
            pos = buf.find(key)
            while pos >= 0:
                positions.append(pos)
                pos = buf.find(key, pos + len(key))
        index = _LineIndex(buf, self.lines_before)
        for pos in sorted(positions):
            self._restart_at(buf, index, pos)

    def _restart_at(self, buf: bytes, index: _LineIndex, pos: int) -> None:
        lineno, line, start = index.at(pos)
        if lineno == 1:
            return  # the first row of a trial, not a restart
        self.history.restart_count += 1
        if len(self.history.restarts) >= MAX_RESTARTS:
            return
        if start > 0:
            prev = buf[buf.rfind(b"\n", 0, start - 1) + 1 : start - 1]
        else:
            prev = self.prev_line or b""
        before = ITERATION.search(prev)
        after = ITERATION.search(line)
        self.history.restarts.append(
            Restart(
                line=lineno,
                from_iteration=int(before[1]) if before else None,
                to_iteration=int(after[1]) if after else None,
            )
        )

    def _scan_checkpoints(self, buf: bytes) -> None:
        """The iteration each wanted checkpoint was reported at, and the last one reported.

        Targeted searches, not a pass over every row: a trial that checkpoints every
        iteration would otherwise cost a regex match per row.
        """
        for name in self.checkpoints_wanted:
            pos = buf.rfind(CHECKPOINT_KEY + name.encode() + b'"')
            if pos >= 0:
                self.history.checkpoint_iterations[name] = self._iteration_on_line(buf, pos)
        pos = buf.rfind(CHECKPOINT_KEY)
        if pos >= 0:
            match = CHECKPOINT.match(buf, pos)
            if match:
                name = match[1].decode("utf-8", "replace")
                self.history.latest_checkpoint = name
                self.history.checkpoint_iterations[name] = self._iteration_on_line(buf, pos)

    @staticmethod
    def _iteration_on_line(buf: bytes, pos: int) -> int | None:
        start = buf.rfind(b"\n", 0, pos) + 1
        end = buf.find(b"\n", pos)
        match = ITERATION.search(buf, start, end)
        return int(match[1]) if match else None

    def finish(self, tail: bytes) -> History:
        history = self.history
        if tail.strip():
            # No trailing newline: a complete row that lost its "\n", or a row cut off mid-write.
            lineno = self.lines_before + 1
            if _loads(tail.strip()) is None:
                history.truncated_tail = True
                self._bad(lineno)
            else:
                self.feed(tail + b"\n")
        history.nonfinite = sorted(self.nonfinite.values(), key=lambda n: n.first_line)
        row = _loads(self.last_good) if self.last_good else None
        if row is not None:
            # The row's dict is built only if a report needs it (see last_row): most trials'
            # last result comes from the experiment state.
            history.last_line = self.last_good
            history.last_iteration = _int(row.get("training_iteration"))
            history.last_time = _number(row.get("timestamp"))
        # Iterations only go back at a restart, so the furthest one reached is the last row's
        # or the one just before some restart.
        reached = [r.from_iteration for r in history.restarts] + [history.last_iteration]
        history.max_iteration = max((i for i in reached if i is not None), default=None)
        return history


def summarize_results(
    storage: Storage, path: str, checkpoints_wanted: Iterable[str] = ()
) -> History:
    """Summarise a result.json (JSON lines). Raises StorageError when it cannot be read.

    `checkpoints_wanted`: checkpoint dir names whose reported iteration is looked up.
    """
    summarizer = _Summarizer(storage.display(path), checkpoints_wanted)
    carry = b""
    for chunk in storage.iter_chunks(path):
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n") + 1
        if cut:
            summarizer.feed(data[:cut])
            carry = data[cut:]
        else:
            carry = data
        if len(carry) > MAX_LINE:
            # One line bigger than any real result row: count it as bad and drop it.
            summarizer._bad(summarizer.lines_before + 1)
            summarizer.lines_before += 1
            carry = b""
    return summarizer.finish(carry)


def iter_result_rows(storage: Storage, path: str) -> Iterator[dict[str, Any]]:
    """Every parseable row of a result.json, streamed; unparseable lines are skipped."""
    try:
        for line in storage.iter_lines(path, MAX_LINE):
            row = _loads(line) if line.strip() else None
            if row is not None:
                yield row
    except StorageError:
        return


def summarize_progress_csv(storage: Storage, path: str) -> History:
    """progress.csv, for trials that have no result.json (older Ray, or JSON logger off)."""
    history = History(path=storage.display(path))
    header: list[str] | None = None
    for lineno, raw in enumerate(storage.iter_lines(path, MAX_LINE), start=1):
        text = raw.decode("utf-8", "replace")
        if not text.strip():
            continue
        try:
            values = next(csv.reader(io.StringIO(text)))
        except (csv.Error, StopIteration):
            history.bad_lines.append(lineno)
            continue
        if header is None:
            header = values
            continue
        if len(values) != len(header):
            if len(history.bad_lines) < MAX_BAD_LINES:
                history.bad_lines.append(lineno)
            continue
        row = {key: _csv_value(value) for key, value in zip(header, values, strict=True)}
        history.rows += 1
        iteration = _int(row.get("training_iteration"))
        if history.rows == 1:
            history.first_iteration = iteration
            history.first_time = _number(row.get("timestamp"))
        if row.get("iterations_since_restore") == 1 and history.rows > 1:
            history.restart_count += 1
            if len(history.restarts) < MAX_RESTARTS:
                history.restarts.append(Restart(lineno, history.last_iteration, iteration))
        for metric, value in nonfinite_metrics(row):
            if metric not in {n.metric for n in history.nonfinite}:
                history.nonfinite.append(NonFinite(metric, value, lineno, iteration, 1))
        history.last_iteration = iteration
        history.last_time = _number(row.get("timestamp"))
        if iteration is not None:
            history.max_iteration = max(history.max_iteration or iteration, iteration)
        history.last_row = scalars(row)
    return history


def _csv_value(text: str) -> Any:
    if text == "":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)
