"""Text as people paste it reads as text as programs wrote it, and evidence still points at the
line of the original text."""

from __future__ import annotations

import json

import pytest
from conftest import inspect_json

from ray_doctor.scan._normalise import clean, normalise_lines, wrap_width

OOM = (
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory. "
    "Memory on the node (IP: 10.0.0.1, ID: 4cb2) where the task (task ID: 43, name=train, "
    "pid=11362, memory used=1.25GB) was running was 27.71GB / 28.80GB (0.962273), which exceeds "
    "the memory usage threshold of 0.95."
)


@pytest.mark.parametrize(
    ("pasted", "text"),
    [
        ("\x1b[33m(raylet)\x1b[0m Killed", "(raylet) Killed"),
        ("#033[2m(raylet)#033[0m Killed", "(raylet) Killed"),
        ("^[[33m(raylet)^[[0m Killed", "(raylet) Killed"),
        ("\\x1b[33m(raylet)\\x1b[0m Killed", "(raylet) Killed"),
        ("[36m(raylet)[0m Killed", "(raylet) Killed"),
        ("> > ValueError: bad", "ValueError: bad"),
        ("&lt;Signals.SIGKILL: 9&gt;", "<Signals.SIGKILL: 9>"),
        ("Killed\r\n", "Killed"),
        ("**Killed**", "Killed"),
        ("`RuntimeError: boom`", "RuntimeError: boom"),
        ("```Note: you are using a GPU", "Note: you are using a GPU"),
        ("# Traceback (most recent call last):", "Traceback (most recent call last):"),
    ],
)
def test_markup_and_colour_codes_are_removed(pasted, text):
    assert clean(pasted)[0] == text


@pytest.mark.parametrize(
    ("pasted", "text", "rank"),
    [
        (
            "2024-05-01T10:00:00.123456789Z stderr F Traceback (most recent",
            "Traceback (most recent",
            None,
        ),
        ("[pod/ray-head-x7/ray-head] Killed", "Killed", None),
        (
            "Nov 23 04:23:46 node1 kernel: Out of memory: Killed process 12",
            "Out of memory: Killed process 12",
            None,
        ),
        (
            "[12345.678901] Out of memory: Killed process 12",
            "Out of memory: Killed process 12",
            None,
        ),
        (
            '[rank1]:   File "train.py", line 3, in <module>',
            '  File "train.py", line 3, in <module>',
            1,
        ),
        ("[default0]:RuntimeError: boom", "RuntimeError: boom", 0),
        ("[1,0]<stderr>:RuntimeError: boom", "RuntimeError: boom", None),
        ("0: RuntimeError: boom", "RuntimeError: boom", None),
        ("2024-05-01T10:00:00Z [rank3]: RuntimeError: boom", "RuntimeError: boom", 3),
    ],
)
def test_collector_prefixes_are_removed_and_ranks_kept(pasted, text, rank):
    cleaned, prefixed, found_rank = clean(pasted)
    assert (cleaned, prefixed, found_rank) == (text, True, rank)


def test_ray_records_keep_their_timestamps():
    line = "2024-05-01 10:00:00,123\tERROR tune_controller.py:1331 -- Trial task failed"
    assert clean(line) == (line, False, None)


def test_json_lines_records_are_unpacked_with_their_traceback():
    record = {
        "asctime": "2024-05-01 10:00:00",
        "levelname": "ERROR",
        "message": "Trial task failed for trial t_00000",
        "exc_text": 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad',
    }
    fluentd = {"log": json.dumps(record) + "\n", "stream": "stderr"}
    lines = list(normalise_lines(["first line\n", json.dumps(fluentd) + "\n"]))
    assert [line.text for line in lines] == [
        "first line",
        "Trial task failed for trial t_00000",
        "Traceback (most recent call last):",
        '  File "x.py", line 1',
        "ValueError: bad",
    ]
    assert {line.lineno for line in lines[1:]} == {2}


def _hard_wrap(text: str, width: int) -> list[str]:
    return [text[i : i + width] + "\n" for i in range(0, len(text), width)]


def test_hard_wrapped_text_is_joined_and_numbered_from_its_first_line():
    lines = ["Traceback (most recent call last):\n", *_hard_wrap(OOM, 100), "done\n"]
    assert wrap_width([line.rstrip("\n") for line in lines]) == 100
    logical = list(normalise_lines(lines))
    assert logical[1].text == OOM
    assert logical[1].lineno == 2
    assert logical[2].text == "done"


def test_lines_padded_to_the_width_are_not_joined():
    """A progress line padded with spaces to the terminal's width (Ginex #3) was not cut by
    the terminal: the line after it stays its own, while wrapped lines are still joined."""
    padded = ["Running 0th superbatch".ljust(100) + "\n", "Step 1: Superbatch Sample".ljust(100)]
    lines = [*_hard_wrap(OOM, 100), padded[0], padded[1] + "\n", "Killed\n"]
    logical = [line.text for line in normalise_lines(lines)]
    assert logical[0] == OOM
    assert logical[-1] == "Killed"
    assert len(logical) == 4


def test_repeated_lines_are_not_taken_for_wrapping():
    lines = [OOM[:90] + "\n", OOM[:90] + "\n", "short\n"]
    assert wrap_width([line.rstrip("\n") for line in lines]) is None


def test_unwrapped_text_is_left_alone():
    lines = [OOM + "\n", "short\n", OOM[:90] + "\n"]
    assert wrap_width([line.rstrip("\n") for line in lines]) is None
    assert [line.text for line in normalise_lines(lines)] == [OOM, "short", OOM[:90]]


def test_inspect_reads_a_wrapped_coloured_quoted_paste(tmp_path):
    body = "".join(f"> \x1b[31m{chunk}" for chunk in _hard_wrap(OOM, 110))
    pasted = tmp_path / "issue.md"
    pasted.write_text("Here is my error:\r\n```\r\n" + body.replace("\n", "\r\n") + "```\r\n")
    code, report = inspect_json(str(pasted))
    assert code == 1
    (finding,) = report["findings"]
    assert finding["rule"] == "oom-ray-memory-monitor"
    assert "28.80GB" in finding["message"]
    # The evidence points at the line the wrapped text started on in the pasted file.
    assert finding["evidence"][0]["line"] == 3


def test_error_files_read_after_others_parse_as_they_do_alone():
    """Lines are remembered across files (a sweep repeats one traceback): what a file parses
    to must not depend on what was read before it, nor may a long line be cut by the memo."""
    from pathlib import Path

    from ray_doctor.scan import _normalise, _traceback
    from ray_doctor.scan._errorfile import parse_error_lines

    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    files = sorted(fixtures.glob("*/ray_results/*/*/error.txt"))
    assert len(files) >= 10
    long_line = "ValueError: " + "x" * (_normalise.MEMO_MAX_CHARS * 2)

    def parse_all(paths: list[Path]) -> dict[Path, str]:
        parsed = {}
        for path in paths:
            lines = [*path.read_text().splitlines(keepends=True), long_line]
            parsed[path] = repr(parse_error_lines(lines, str(path)))
        return parsed

    def alone(path: Path) -> str:
        _normalise._remembered_pieces.cache_clear()
        _traceback._remembered_kind.cache_clear()
        return parse_all([path])[path]

    cold = {path: alone(path) for path in files}
    warm = parse_all(files) | parse_all(list(reversed(files)))
    assert warm == cold
    assert all("x" * _normalise.MEMO_MAX_CHARS * 2 in text for text in cold.values())
