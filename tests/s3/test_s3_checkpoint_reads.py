"""verify-checkpoint on S3 reads each byte once: small blocks make every seam of the read path
(read-ahead blocks, the kept tail, chunks that cut tensor elements) show up in a 6 KB file."""

from __future__ import annotations

import collections
import math
from pathlib import Path

import pytest

from ray_doctor import checkpoint
from ray_doctor.checkpoint import _values, _zip
from ray_doctor.storage import _arrow

# Scaled down as in the product: the first block holds data.pkl (as 64 MiB does), the tail the
# central directory (as 1 MiB does for up to ~10,000 members); the 6 KB file spans 4 blocks.
BLOCK = 2048  # read-ahead per GET (64 MiB in the product)
TAIL = 1600  # the file's end, fetched once (1 MiB in the product)


def problems(result) -> list[tuple[str, str]]:
    """What the report says about each file, without where it is."""
    return [(p.rule, p.message) for c in result.checkpoints for p in c.all_problems]


@pytest.fixture
def small_reads(monkeypatch):
    monkeypatch.setattr(_arrow, "READ_AHEAD", BLOCK)
    monkeypatch.setattr(_arrow, "TAIL", TAIL)
    monkeypatch.setattr(_zip, "CHUNK", 101)  # odd: float32 elements cut between chunks


@pytest.mark.parametrize("scenario", ["healthy", "bitflip", "nonfinite"])
def test_each_byte_fetched_once_and_findings_as_local(
    fixtures: Path, s3_server, monkeypatch, small_reads, scenario: str
) -> None:
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    local = fixtures / "checkpoints" / scenario / "checkpoint.pt"
    uri = s3_server.upload(local.parent, s3_server.bucket(), scenario)
    path, _, query = uri.partition("?")
    size = local.stat().st_size

    with s3_server.counting() as served:
        remote = checkpoint.verify(f"{path}/checkpoint.pt?{query}")
    here = checkpoint.verify(str(local))

    assert problems(remote) == problems(here)
    methods = collections.Counter(method for method, _ in served)
    # One GET per block of the file before its tail, one for the tail: the values are counted
    # in the CRC pass, not read again, and a chunk across a block's end does not refetch it.
    assert methods["GET"] <= math.ceil((size - TAIL) / BLOCK) + 1, served
    assert methods["HEAD"] <= 2, served


def test_nonfinite_found_on_s3_when_the_crc_pass_counts(
    fixtures: Path, s3_server, monkeypatch, small_reads
) -> None:
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    local = fixtures / "checkpoints" / "nonfinite"
    uri = s3_server.upload(local, s3_server.bucket(), "nonfinite")
    path, _, query = uri.partition("?")
    found = problems(checkpoint.verify(f"{path}/checkpoint.pt?{query}"))
    assert [rule for rule, _ in found] == ["checkpoint-nonfinite"], found


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "bfloat16"])
def test_counter_counts_the_same_for_any_split(dtype: str) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    if dtype == "bfloat16":
        values = rng.integers(0, 1 << 16, 5000, dtype=np.uint16)  # bit patterns, NaN/Inf among
        expected = int(np.count_nonzero((values & 0x7F80) == 0x7F80))
    else:
        values = rng.standard_normal(5000).astype(dtype)
        values[rng.choice(5000, 37, replace=False)] = np.nan
        values[rng.choice(5000, 11, replace=False)] = -np.inf
        expected = int(np.count_nonzero(~np.isfinite(values)))
    data = b"\x7f" * 13 + values.tobytes() + b"\xff" * 9  # the tensor inside a longer stream
    for piece in (1, 3, 7, 4096, len(data)):
        counter = _values.NonfiniteCounter(dtype, 13, values.nbytes)
        for position in range(0, len(data), piece):
            counter.feed(position, data[position : position + piece])
        assert counter.count == expected, (dtype, piece)
