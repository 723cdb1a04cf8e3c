"""Turn a block of error text (a `Failure # N` block, a logged traceback) into a `Failure`."""

from __future__ import annotations

import re
from functools import lru_cache

from ray_doctor.model import Evidence, Failure, Frame
from ray_doctor.scan._normalise import MEMO_MAX_CHARS

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
# An exception line: `ValueError: msg`, `ray.exceptions.RayTaskError(ValueError): ray::...`,
# `KeyboardInterrupt`. The type must look like an exception, so that "Trial status: 3" is not one.
EXC_LINE = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)"
    r"(?:\((?P<inner>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\))?"
    r"(?::\s?(?P<msg>.*))?$"
)
EXC_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Warning", "Failure", "Timeout")
EXC_NAMES = {"StopIteration", "GeneratorExit", "CancelledError"}
RANKS = re.compile(r"\[Rank (?P<ranks>[\d,\s]+) Error Snippet\]")
# Ray wraps the user's exception in these; the innermost exception line is the real error.
RAY_WRAPPERS = {
    "RayTaskError",
    "RayActorError",
    "ActorDiedError",
    "TuneError",
    "TrainingFailedError",
    "WorkerGroupError",
    "ControllerError",
}
CHAIN_MARKERS = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)

# Ray's exceptions whose str() carries no type name: recognise them by their first words.
KNOWN_MESSAGES = (
    ("The actor died unexpectedly before finishing this task", "ActorDiedError"),
    ("The actor died because of an error raised in its creation task", "ActorDiedError"),
    ("The actor experienced an error before finishing this task", "RayActorError"),
    ("The worker died unexpectedly while executing this task", "WorkerCrashedError"),
    ("Task was killed due to the node running low on memory", "OutOfMemoryError"),
    ("were killed due to the node running low on memory", "OutOfMemoryError"),
)
# Frames from these places are library code; the user frame is the last one elsewhere.
LIBRARY_PATH = re.compile(
    r"(site-packages|dist-packages|/lib/python\d[\d.]*/|<frozen |<string>|"
    r"/ray/(tune|train|air|_private|util|_raylet)|/torch/)"
)
MAX_MESSAGE_LINES = 25
MAX_LINE_CHARS = 2_000


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def is_exception_line(line: str) -> re.Match[str] | None:
    if not line or line[0].isspace():
        return None
    match = EXC_LINE.match(line.rstrip())
    if not match:
        return None
    name = match["type"].rsplit(".", 1)[-1]
    if name.endswith(EXC_SUFFIXES) or name in EXC_NAMES:
        return match
    return None


def _line_kind(line: str) -> tuple[str, int, str] | re.Match[str] | None:
    """A frame line's (file, line, function), an exception line's match, or None."""
    return _remembered_kind(line) if len(line) <= MEMO_MAX_CHARS else _kind_of(line)


def _kind_of(line: str) -> tuple[str, int, str] | re.Match[str] | None:
    frame = FRAME.match(line)
    if frame:
        return frame["file"], int(frame["line"]), frame["func"]
    return is_exception_line(line)


# A sweep's failures repeat one traceback, so most lines of the second and later blocks were
# classified before (see the normaliser's memo).
_remembered_kind = lru_cache(maxsize=16_384)(_kind_of)


def _short_type(name: str | None) -> str | None:
    return name.rsplit(".", 1)[-1] if name else None


def _message(lines: list[tuple[int, str]], start: int, first: str) -> str:
    """The exception message: the text after `Type:` plus continuation lines."""
    parts = [first.strip()] if first.strip() else []
    for _, line in lines[start + 1 : start + MAX_MESSAGE_LINES]:
        if not line.strip() or FRAME.match(line) or is_exception_line(line):
            break
        if line.startswith(("Traceback (", "[Rank ")) or line.startswith(CHAIN_MARKERS):
            break
        parts.append(line.rstrip())
    return "\n".join(parts).strip()


def user_frame(frames: list[Frame]) -> Frame | None:
    for frame in reversed(frames):
        if not LIBRARY_PATH.search(frame.file):
            return frame
    return None


def parse_failure(
    lines: list[tuple[int, str]],
    path: str,
    number: int | None = None,
    time: str | None = None,
) -> Failure:
    """Parse numbered lines of one failure block (header excluded) into a Failure."""
    frames: list[Frame] = []
    exceptions: list[tuple[int, re.Match[str]]] = []
    for pos, (_, line) in enumerate(lines):
        kind = _line_kind(line)
        if kind is None:
            continue
        if isinstance(kind, tuple):
            code = None
            if pos + 1 < len(lines):
                nxt = lines[pos + 1][1]
                if nxt.startswith("    ") and not isinstance(_line_kind(nxt), tuple):
                    code = nxt.strip()
            frames.append(Frame(*kind, code))
            continue
        exceptions.append((pos, kind))

    # Trim blank lines at both ends; cap each line so one huge line cannot bloat the model.
    while lines and not lines[0][1].strip():
        lines = lines[1:]
    while lines and not lines[-1][1].strip():
        lines = lines[:-1]
    text = "\n".join(line[:MAX_LINE_CHARS] for _, line in lines)
    line_map = [
        (index, lineno)
        for index, (lineno, _) in enumerate(lines)
        if index == 0 or lineno != lines[index - 1][0] + 1
    ]
    first_line = next((n for n, line in lines if line.strip()), lines[0][0] if lines else None)
    source = Evidence(path, first_line, _first_text(lines))
    ranks = sorted(
        {int(r) for m in RANKS.finditer(text) for r in m["ranks"].split(",") if r.strip()}
    )

    exc_type = wrapper = None
    message = ""
    exc_line = None
    if exceptions:
        pos, last = exceptions[-1]
        if last["inner"] and (last["msg"] or "").startswith("ray::"):
            # `RayTaskError(ValueError): ray::f() (pid=...)` and nothing deeper: the inner type.
            exc_type = _short_type(last["inner"])
        else:
            exc_type = _short_type(last["type"])
            message = _message(lines, pos, last["msg"] or "")
        outer = _short_type(exceptions[0][1]["type"])
        if outer in RAY_WRAPPERS and outer != exc_type:
            wrapper = outer
        lineno, raw = lines[pos]
        exc_line = Evidence(path, lineno, raw.strip()[:300])
    else:
        # No `Type: message` line: Ray's actor/worker death texts, or plain text.
        body = [(n, line) for n, line in lines if line.strip() and not line.startswith("ray::")]
        for marker, name in KNOWN_MESSAGES:
            hit = next(((n, line) for n, line in body if marker in line), None)
            if hit:
                exc_type = name
                exc_line = Evidence(path, hit[0], hit[1].strip()[:300])
                break
        message = "\n".join(line.strip() for _, line in body[:MAX_MESSAGE_LINES])
    return Failure(
        number=number,
        time=time,
        exc_type=exc_type,
        message=message,
        wrapper=wrapper,
        frames=frames,
        user_frame=user_frame(frames),
        ranks=ranks,
        text=text,
        line_map=line_map,
        source=source,
        exc_line=exc_line,
    )


def _first_text(lines: list[tuple[int, str]]) -> str:
    for _, line in lines:
        if line.strip():
            return line.strip()[:300]
    return ""
