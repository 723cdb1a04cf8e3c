"""A long stored log is skimmed (`scan/_skim.py`): only the lines the reader could act on are
decoded and read, the rest counted. It must find exactly what reading every line finds."""

from __future__ import annotations

import random

import pytest
from conftest import REPO, inspect_json

from ray_doctor.scan import _logs
from ray_doctor.scan._linesource import LineSource
from ray_doctor.scan._normalise import MAX_BUFFERED_LINES

# Lines of long runs, none a cause: training prints, logging records, progress bars, dicts.
FILLER = (
    "(RayTrainWorker pid={pid}) epoch {a} step {b} loss 0.{b} acc 0.{a} lr 0.0003",
    "2026-11-22 06:31:{a:02d},836\tINFO worker.py:{b} -- Connecting to existing Ray cluster",
    "",
    "(train_fn pid={pid}, ip=10.0.0.{a}) {{'loss': 0.{b}, 'training_iteration': {a}}}",
    "[2026-11-22 06:31:39,836 I {pid} {pid}] (raylet) main.cc:{b}: all is well",
    "  an indented line {b}",
    "Epoch {a}: 100%|██████████| {b}/{b} [00:01<00:00, 9.5it/s]",
)


def _filler(rnd: random.Random, count: int) -> list[str]:
    return [
        rnd.choice(FILLER).format(
            pid=rnd.randrange(100, 99_999), a=rnd.randrange(60), b=rnd.randrange(10**6)
        )
        for _ in range(count)
    ]


def _read(lines: list[str], name: str, chunk: int, skim: bool, monkeypatch) -> tuple:
    """`read_log_file`'s way through a stored file (chunks, jumps, tail), skimmed or not."""
    data = ("\n".join(lines) + "\n").encode()
    with monkeypatch.context() as patch:
        if not skim:
            patch.setattr(_logs, "_skim", lambda source, pasted, short: None)
        pasted = _logs._pasted(name)
        source = LineSource(
            (data[i : i + chunk] for i in range(0, len(data), chunk)),
            _logs.PASTED_OPENERS if pasted else _logs.MACHINE_OPENERS,
            tail=_logs.TAIL_BYTES,
        )
        result = _logs.parse_log(source, name, name)
    failures = [
        (f.exc_type, f.message, f.source, f.exc_line, f.text, f.ranks, trial)
        for f, trial in result.failures
    ]
    events = [(e.kind, e.source, e.trial, e.pid, e.text) for e in result.events]
    return (failures, events), source.lines_passed_over


CASES = sorted((REPO / "tests" / "corpus" / "cases").rglob("*.txt"))


@pytest.mark.parametrize("name", ["driver.log", "raylet.out"])
def test_real_error_texts_in_a_long_log_are_read_the_same_skimmed(name, monkeypatch):
    # The corpus (outputs copied from public issue trackers, none written by us), each case
    # after a run of plain lines, in two logs a name: one read in 4 MB chunks (known long from
    # its first buffer: skimmed from its first line), one in chunks of 997 bytes (needles and
    # line ends across chunks; skimmed past the head a pasted log holds back).
    rnd = random.Random(name)
    texts = [case.read_text(errors="replace").splitlines() for case in CASES]
    assert len(texts) > 1000
    skimmed_over = 0
    half = len(texts) // 2
    for chunk, cases in ((4 * 2**20, texts[:half]), (997, texts[half:])):
        lines = _filler(rnd, MAX_BUFFERED_LINES + 100)
        for text in cases:
            lines += _filler(rnd, rnd.choice([0, 1, 3, 7, 40, 200])) + text
        skimmed, passed = _read(lines, name, chunk, True, monkeypatch)
        read, passed_unskimmed = _read(lines, name, chunk, False, monkeypatch)
        assert skimmed == read, (name, chunk)
        skimmed_over += passed - passed_unskimmed
    assert skimmed_over > 30_000  # it did skim: many filler lines were never read


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_long_training_log_is_skimmed_to_its_failure(newline, monkeypatch):
    rnd = random.Random(7)
    tail = [  # a worker's own stderr: no `(pid=...)` prefix, which the driver adds
        "Traceback (most recent call last):",
        '  File "train.py", line 12, in train_func',
        "    loss = model(batch)",  # no needle: read as part of the traceback
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    lines = _filler(rnd, 80_000) + tail + _filler(rnd, 500)
    lines = [line + newline[:-1] for line in lines]  # CRLF: each line ends with "\r"
    (failures, events), passed = _read(
        lines, "worker-ab-01000000-4242.err", 4 * 2**20, True, monkeypatch
    )
    assert passed > 75_000  # of its 80,504 lines
    assert [(f[0], f[2].line) for f in failures] == [("RuntimeError", 80_001)]
    assert "loss = model(batch)" in failures[0][4]
    assert _read(lines, "worker-ab-01000000-4242.err", 4 * 2**20, False, monkeypatch)[0] == (
        failures,
        events,
    )


def test_the_context_before_a_skimmed_traceback_is_read(monkeypatch):
    # Ray's metrics server failing to start is logged and carried on from: the line before the
    # traceback says so, holds no needle, and must still reach the reader.
    rnd = random.Random(8)
    handled = [
        "An exception occurred while starting the metrics server",
        "Traceback (most recent call last):",
        '  File "metrics.py", line 1, in start',
        "OSError: [Errno 98] Address already in use",
    ]
    lines = _filler(rnd, 40_000) + handled + _filler(rnd, 100)
    for name in ("monitor.log", "driver.log"):
        skimmed, passed = _read(lines, name, 65_536, True, monkeypatch)
        assert passed > 15_000
        assert skimmed == _read(lines, name, 65_536, False, monkeypatch)[0]
        assert not skimmed[0]  # Ray's own, handled: no failure


@pytest.mark.parametrize(
    "line",
    [
        "winsock returned 10048",  # a needle with digits (every number is one as a template)
        "the node ran out of me\x1b[0mmory",  # a colour code inside a cause word
        "RuntimeError: \u212aILLED by the kernel",  # KELVIN SIGN lowers to "k"
        '{"message": "Traceback (most recent call last):\\n  File \\"t.py\\", line 1\\nKeyError: 3"}',
        "the job was oom-killed",
    ],
)
def test_a_line_that_matters_is_read_however_it_is_written(line, monkeypatch):
    rnd = random.Random(line)
    lines = [*_filler(rnd, MAX_BUFFERED_LINES + 5000), line, *_filler(rnd, 5000)]
    skimmed, passed = _read(lines, "driver.log", 65_536, True, monkeypatch)
    assert passed > 4_000
    assert skimmed == _read(lines, "driver.log", 65_536, False, monkeypatch)[0]
    assert any(e[1].line == MAX_BUFFERED_LINES + 5_001 for e in skimmed[1]) or skimmed[0]


def test_line_source_hands_out_what_its_selector_picks():
    lines = [f"line {n}" for n in range(1, 20_001)]
    data = ("\n".join(lines) + "\n").encode()

    class EverySeventh:
        calls = 0
        region_bytes = 4096

        def select(self, region: bytes) -> list[int] | None:
            self.calls += 1
            if self.calls % 3 == 0:
                return None  # this region whole
            picked, at = [], 0
            while at < len(region):
                end = region.index(b"\n", at)
                if int(region[at:end].split()[1]) % 7 == 0:
                    picked.append(at)
                at = end + 1
            return picked

    selector = EverySeventh()
    source = LineSource(data[i : i + 997] for i in range(0, len(data), 997))
    source.select = selector
    source.select_from = 100
    handed = list(source)
    assert selector.calls > 3
    assert handed[:100] == [(n, f"line {n}") for n in range(1, 101)]
    assert all(text == f"line {number}" for number, text in handed)  # numbered as the file is
    assert {n for n, _ in handed if n % 7 == 0} == set(range(7, 20_001, 7))
    assert source.lines_passed_over == 20_000 - len(handed)


def test_piped_text_is_read_as_the_same_bytes_in_a_file_are(fixtures, tmp_path):
    # `kubectl logs ... | ray-doctor inspect -`: a long run's output, piped and saved.
    rnd = random.Random(9)
    driver = (fixtures / "train_v2_rank_failure" / "driver.log").read_text()
    text = "\n".join(_filler(rnd, 40_000)) + "\n" + driver
    saved = tmp_path / "driver.log"
    saved.write_text(text)
    _, piped = inspect_json("-", stdin=text)
    _, stored = inspect_json(str(saved))

    def seen(report: dict) -> list[tuple]:
        return [
            (f["rule"], f["message"], [(e["line"], e["excerpt"]) for e in f["evidence"]])
            for f in report["findings"]
        ]

    assert seen(piped) and seen(piped) == seen(stored)
    assert any((e["line"] or 0) > 40_000 for f in piped["findings"] for e in f["evidence"])


def test_a_skimmed_traceback_that_lost_its_indentation_is_read_whole(monkeypatch):
    rnd = random.Random(10)
    pasted = [
        "Traceback (most recent call last):",
        'File "/home/u/train.py", line 13, in',
        "trainer.fit(model)",  # no needle, not indented: read only as the traceback's
        'File "/opt/lib/fit.py", line 283, in fit',
        "out = self.step(batch)",
        'File "/opt/lib/step.py", line 40, in step',
        "return self.module(batch)",
        'File "/opt/lib/module.py", line 7, in __call__',
        "return self.forward(x)",
        "RuntimeError: Wait timeout",
    ]
    lines = _filler(rnd, MAX_BUFFERED_LINES + 3_000) + pasted + _filler(rnd, 3_000)
    skimmed, passed = _read(lines, "driver.log", 4 * 2**20, True, monkeypatch)
    assert passed > 20_000
    assert skimmed == _read(lines, "driver.log", 4 * 2**20, False, monkeypatch)[0]
    assert [(f[0], f[2].line) for f in skimmed[0]] == [("RuntimeError", MAX_BUFFERED_LINES + 3_001)]
    assert "trainer.fit(model)" in skimmed[0][0][4]


def test_cause_words_with_digits_are_told_apart_in_a_batch_of_one_template():
    """A batch's cause words are looked for in its distinct lines with digits made `0`; a word
    with digits (Windows' socket error 10048) is still looked for line by line."""
    from ray_doctor.scan._logs import hot_lines

    lines = [f"[2026-11-22 06:31:{i:02d}] bind failed: error {10040 + i}" for i in range(12)]
    assert hot_lines(lines) == [10040 + i == 10048 for i in range(12)]
    lines = [f"epoch {i}: loss=nan" if i == 7 else f"epoch {i}: loss=0.{i}" for i in range(12)]
    assert hot_lines(lines) == [i == 7 for i in range(12)]
