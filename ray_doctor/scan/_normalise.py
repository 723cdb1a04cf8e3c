"""One text normaliser for every text input: text as people paste it is not text as programs wrote it.

Between a program's `print` and ray-doctor, real error text picks up:
- colour codes: raw ESC sequences, or escaped by whatever stored them (journald's `#033[2m`,
  caret notation `^[[33m`, `\\x1b[`, `\\033[`, `\\u001b[`), or with the ESC lost in a copy
  (`[36m(pid=12)[0m`);
- log-collector prefixes: ISO timestamps, CRI's `stdout F`, `kubectl logs --prefix`'s
  `[pod/name/container]`, syslog's `Mon DD HH:MM:SS host proc[pid]:`, dmesg's `[  123.45]`,
  torchrun's `[rank0]:` / `[default0]:`, mpirun's `[1,0]<stderr>:`, `srun -l`'s `0:`,
  DeepSpeed's `host: `;
- JSON-lines records (Ray's structured logging, Fluentd, Loki exports): the text is a field;
- Markdown: `> ` quotes and code fences; HTML entities (`&lt;`, `&#39;`); CRLF;
- hard wrapping at a fixed column (mid-word) by a terminal or a mail client.

`normalise_lines` undoes all of that and yields `TextLine`s that keep the number of the line
they started on, so evidence still points at the original text. The rank a `[rankN]:` prefix
named is kept: it says which process printed the line.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import NamedTuple

# Colour / cursor codes in every form seen in pasted logs. The ESC may be a real byte, an
# escaped spelling of it, or gone (only `[0m` is left).
ANSI_CODES = re.compile(
    r"(?:\x1b|#033|\^\[|\\x1b|\\033|\\u001b|\\e)\[[0-9;?]*[A-Za-z]"
    r"|(?<![\w\]])\[(?:\d{1,3};)*\d{1,3}m"
)
MARKDOWN_QUOTE = re.compile(r"^(?:\s{0,3}>\s?)+")
# A fence line is only a fence (and a language tag); text after it on the line is kept.
CODE_FENCE = re.compile(r"^\s{0,3}(?:```|~~~)")
FENCE_TAG = re.compile(r"^[\w+-]*\s*$")
# A whole line in **bold**, _italics_ or `inline code`, as people mark the line that matters.
MARKDOWN_WRAP = re.compile(r"^(\*\*|__|\*|_|`+)(?P<inner>\S(?:.*\S)?)\1$")
# A line commented out with `#` (pasted into a script or a shell session): `# Traceback ...`.
COMMENT_MARK = re.compile(r"^\s{0,4}#+ ?(?=\S|\s+File )")
# Prefixes a collector or launcher puts before the program's own line, tried in order until
# none matches. Ray's own records keep their timestamps (the parser uses them as record starts).
COLLECTOR_PREFIXES = (
    # CRI / containerd log files: `2024-01-01T00:00:00.123456789Z stdout F `.
    re.compile(
        r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})\s+(?:stdout|stderr)\s+[FP]\s"
    ),
    # `kubectl logs --prefix`: `[pod/ray-head-xyz/ray-head] `.
    re.compile(r"^\[pod/[^\]\s]+\]\s"),
    # A collector's ISO timestamp (with a T or a zone) before the line: Loki, Datadog, CloudWatch.
    re.compile(
        r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s*(?:\|\s*)?"
    ),
    # syslog / journalctl: `Nov 23 04:23:46 host kernel: `, `Nov 23 04:23:46 host app[123]: `.
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \S+ [\w./-]+(?:\[\d+\])?: "),
    # dmesg: `[12345.678901] ` and `dmesg -T`: `[Mon Nov 23 04:23:46 2026] `.
    re.compile(r"^\[\s*\d+\.\d+\]\s|^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d [\d:]{8} \d{4}\]\s"),
    # mpirun --tag-output: `[1,0]<stderr>:`.
    re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:"),
    # `srun -l`: `0: `; DeepSpeed's pdsh launcher: `worker-1: `, `localhost: `, `10.0.0.1: `.
    re.compile(r"^\d{1,4}: (?=\S|\s+File )"),
    re.compile(
        r"^(?:localhost|worker-\d+|\d{1,3}(?:\.\d{1,3}){3}|[a-z][\w-]*-\d+): (?=\S|\s+File )"
    ),
)
# The prefixes by their first character, so a line tries only those that can match it.
BRACKET_PREFIXES = tuple(p for p in COLLECTOR_PREFIXES if p.pattern.startswith(r"^\["))
HOST_PREFIX = COLLECTOR_PREFIXES[-1]  # `localhost: `, `worker-1: `, `10.0.0.1: `
DIGIT_PREFIXES = (*(p for p in COLLECTOR_PREFIXES if p.pattern.startswith(r"^\d")), HOST_PREFIX)
LETTER_PREFIXES = (
    *(p for p in COLLECTOR_PREFIXES if p not in BRACKET_PREFIXES and p not in DIGIT_PREFIXES),
    HOST_PREFIX,
)
# torchrun / torch.distributed: `[rank3]:`, `[default3]:` (one per local rank with --tee).
RANK_PREFIX = re.compile(r"^\[(?:rank|default)(?P<rank>\d+)\]: ?")
JSON_TEXT_FIELDS = ("message", "msg", "log", "MESSAGE", "textPayload", "line", "text")
JSON_TRACE_FIELDS = ("exc_text", "exc_info", "stack_trace", "traceback", "exception")
# Pasted text is read whole to undo hard wrapping; longer inputs are logs written by programs,
# which do not wrap, and are streamed.
MAX_BUFFERED_LINES = 20_000
MIN_WRAP_WIDTH = 60
MIN_WRAPPED_LINES = 2


class TextLine(NamedTuple):
    """A logical line of text: where it started, its normalised text, what stood before it.
    (A named tuple: a 100 MB raylet.out makes a million of them, and a frozen dataclass
    took three times as long to build.)"""

    lineno: int
    text: str
    prefixed: bool = False  # a collector put a prefix before it: a record of its own
    rank: int | None = None


MARKUP_STARTS = frozenset("*_`#")


# What a colour code in any of its forms holds (`ANSI_CODES`): a line with none has none.
ESCAPE_MARKERS = ("\x1b", "033[", "^[[", "\\", "[0m", "[39m", "[22m")
# What `clean` may rewrite inside a line rather than cut from its ends: colour codes, entities
# (`&lt;`), and a carriage return before the line's end (`INNER_CR`). A line holding none of
# these comes out of `clean` as a slice of itself, so a string in the cleaned line is in the
# raw one.
REWRITE_MARKERS = (*ESCAPE_MARKERS, "&")
INNER_CR = "\r(?=[^\r\n])"  # a pattern: a CRLF line's own "\r" is cut from its end


def _has_escape(line: str) -> bool:
    """Cheap test before the colour-code regex: most lines of a big log hold none."""
    return any(marker in line for marker in ESCAPE_MARKERS)


def clean(raw: str) -> tuple[str, bool, int | None]:
    """(text, prefixed, rank) for one physical line."""
    line = raw.rstrip("\r\n")
    if "\r" in line:
        line = line.replace("\r", "")
    if "&" in line and ";" in line:
        line = html.unescape(line)
    if _has_escape(line):
        line = ANSI_CODES.sub("", line)
    if not line:
        return line, False, None
    head = line.lstrip()[:1]
    if head == ">":
        quote = MARKDOWN_QUOTE.match(line)
        if quote:
            line = line[quote.end() :]
            head = line.lstrip()[:1]
    if head in ("`", "~") and CODE_FENCE.match(line):
        line = line[CODE_FENCE.match(line).end() :]  # type: ignore[union-attr]
        if FENCE_TAG.match(line):
            return "", False, None
        line = line.rstrip().removesuffix("```").removesuffix("~~~")
        head = line.lstrip()[:1]
    if head in MARKUP_STARTS:
        line = _unwrap_markdown(line)
    prefixed = False
    rank = None
    for _ in range(4):  # prefixes stack: a timestamp, then a rank, then a host
        found = _strip_prefix(line)
        if found is None:
            break
        line, rank_here = found
        prefixed = True
        rank = rank if rank_here is None else rank_here
    return line, prefixed, rank


def _unwrap_markdown(line: str) -> str:
    stripped = line.strip()
    wrapped = MARKDOWN_WRAP.match(stripped)
    if wrapped:
        return wrapped["inner"]
    comment = COMMENT_MARK.match(line)
    if comment and not line.lstrip("# ").startswith("!"):
        return line[comment.end() :]
    return line


def _strip_prefix(line: str) -> tuple[str, int | None] | None:
    first = line[:1]
    if first == "[":
        ranked = RANK_PREFIX.match(line)
        if ranked:
            return line[ranked.end() :], int(ranked["rank"])
        patterns = BRACKET_PREFIXES
    elif first.isdigit():
        if line[10:11] not in ("T", ":") and ": " not in line[:16]:
            return None  # neither an ISO timestamp with a T, nor `0: `, nor `10.0.0.1: `
        patterns = DIGIT_PREFIXES
    elif first.isalpha():
        if ": " not in line[:48]:
            return None  # a syslog or host prefix ends with ": " early in the line
        patterns = LETTER_PREFIXES
    else:
        return None
    for pattern in patterns:
        match = pattern.match(line)
        if match and match.end() < len(line):
            return line[match.end() :], None
    return None


def machine_lines(lines: Iterable[str]) -> Iterator[TextLine]:
    """Lines of a log a program wrote (Ray's own): only line ends and colour codes go."""
    return machine_numbered(enumerate(lines, start=1))


def machine_numbered(numbered: Iterable[tuple[int, str]]) -> Iterator[TextLine]:
    """`machine_lines` of lines that come with their numbers (a reader may jump over some)."""
    for lineno, raw in numbered:
        yield TextLine(lineno, _machine_text(raw))


def _machine_text(raw: str) -> str:
    line = raw.rstrip("\r\n")
    return ANSI_CODES.sub("", line) if "\x1b" in line else line


def _json_texts(line: str) -> list[str] | None:
    """The text lines of a JSON-lines log record, or None when the line is not one."""
    stripped = line.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    try:
        record = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    texts = []
    for key in JSON_TEXT_FIELDS:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            nested = _json_texts(value)  # Fluentd wraps a JSON log line in {"log": "..."}
            texts += nested if nested is not None else value.splitlines()
            break
    for key in JSON_TRACE_FIELDS:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            texts += value.splitlines()
    return texts if texts else None


def logical_text(raw: str, pasted: bool) -> str | None:
    """The text one physical line becomes, as `normalise_numbered` past its head (`pasted`)
    or `machine_numbered` make it; None when it becomes several (a JSON-lines record)."""
    if not pasted:
        return _machine_text(raw)
    if _json_texts(raw) is not None:
        return None
    return clean(raw)[0]


# What a physical line became, by its text: the error files of a sweep repeat one traceback
# with a few lines changed (a pid, a time), so most lines of the second and later files were
# seen before (5,000 error files: 175 -> 85 us each). Long lines are not kept: they are rare
# in tracebacks and would make the cache's memory unbounded.
MEMO_MAX_CHARS = 400


def _pieces(raw: str) -> tuple[tuple[str, bool, int | None], ...]:
    """(text, prefixed, rank) of each logical line one physical line becomes."""
    return _remembered_pieces(raw) if len(raw) <= MEMO_MAX_CHARS else _line_pieces(raw)


def _line_pieces(raw: str) -> tuple[tuple[str, bool, int | None], ...]:
    texts = _json_texts(raw)
    if texts is None:
        return (clean(raw),)
    return tuple((text, True, rank) for text, _, rank in map(clean, texts))


_remembered_pieces = lru_cache(maxsize=16_384)(_line_pieces)


def _logical(numbered: Iterable[tuple[int, str]]) -> Iterator[TextLine]:
    for lineno, raw in numbered:
        for text, prefixed, rank in _pieces(raw):
            yield TextLine(lineno, text, prefixed, rank)


PADDING = " " * 8


def wrap_width(lines: list[str]) -> int | None:
    """The column text was hard-wrapped at, when it was: at least two different lines exactly
    that long and none longer (a terminal or a mail client cut every long line at the same
    column). Repeats of one line are no sign of it: programs repeat lines."""
    long_lines = [line for line in lines if len(line) >= MIN_WRAP_WIDTH]
    if len(long_lines) < MIN_WRAPPED_LINES:
        return None
    width, _ = Counter(len(line) for line in long_lines).most_common(1)[0]
    at_width = {line for line in long_lines if len(line) == width}
    if len(at_width) < MIN_WRAPPED_LINES or max(len(line) for line in long_lines) != width:
        return None
    return width


def normalise_lines(lines: Iterable[str]) -> Iterator[TextLine]:
    """Logical lines of a text input. A short input is read whole so hard wrapping can be
    undone; a long one is streamed as it comes."""
    return normalise_numbered(enumerate(lines, start=1))


def normalise_numbered(
    numbered: Iterable[tuple[int, str]], long: bool = False
) -> Iterator[TextLine]:
    """`normalise_lines` of lines that come with their numbers (a reader may jump over some
    once it is past the head read whole). `long`: the caller knows there are at least
    MAX_BUFFERED_LINES of them, so none is held back to look for hard wrapping."""
    iterator = iter(numbered)
    if long:
        yield from _logical(iterator)
        return
    head: list[tuple[int, str]] = []
    for pair in iterator:
        head.append(pair)
        if len(head) >= MAX_BUFFERED_LINES:
            break
    else:
        yield from _whole(head)
        return
    yield from _logical(head)
    yield from _logical(iterator)


def _whole(numbered: list[tuple[int, str]]) -> list[TextLine]:
    physical = [raw.rstrip("\r\n") for _, raw in numbered]
    width = wrap_width(physical)
    if width is None:
        return list(_logical(numbered))
    # Each physical line loses its own markup (a `> ` quote, a colour code) before the pieces
    # are joined: the continuation of a quoted wrapped line is quoted too.
    out: list[TextLine] = []
    joining = False
    for (lineno, _), raw in zip(numbered, physical, strict=True):
        text, prefixed, rank = clean(raw)
        if joining and out:
            last = out[-1]
            out[-1] = TextLine(last.lineno, last.text + text, last.prefixed, last.rank)
        else:
            out.append(TextLine(lineno, text, prefixed, rank))
        # A line that reaches the width by trailing spaces was padded to it (a progress bar
        # redrawn in place, a table), not cut by the terminal: the next line is its own.
        joining = len(raw) == width and not raw.endswith(PADDING)
    return out


__all__ = [
    "MEMO_MAX_CHARS",
    "TextLine",
    "clean",
    "logical_text",
    "machine_lines",
    "machine_numbered",
    "normalise_lines",
    "normalise_numbered",
    "wrap_width",
]
