"""checkpoint-corrupt and checkpoint-empty on real torch, safetensors and DCP files."""

from __future__ import annotations

import io
import os
import shutil
import zipfile

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckpt_helpers import rules_of, trained_state, verify_json
from safetensors.torch import save_file


def test_healthy_torch_checkpoint_is_clean(healthy_pt):
    code, report = verify_json(str(healthy_pt.parent))
    assert code == 0 and report["findings"] == []
    (checkpoint,) = report["checkpoints"]
    assert checkpoint["files"][0]["format"] == "torch-zip"
    assert checkpoint["tensors"] >= 10  # weights, BN buffers and Adam moments


def test_flipped_tensor_byte_is_caught_although_torch_loads_it(healthy_pt, tmp_path):
    # Flip one byte inside a stored tensor: torch.load does not check CRCs and loads garbage.
    with zipfile.ZipFile(healthy_pt) as archive:
        member = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size >= 16)
    data = bytearray(healthy_pt.read_bytes())
    header = member.header_offset
    name_len, extra_len = (
        int.from_bytes(data[header + 26 : header + 28], "little"),
        int.from_bytes(data[header + 28 : header + 30], "little"),
    )
    start = header + 30 + name_len + extra_len
    data[start + 3] ^= 0x40
    healthy_pt.write_bytes(bytes(data))
    torch.load(healthy_pt, weights_only=True)  # no error: that is the problem
    code, report = verify_json(str(healthy_pt))
    assert code == 1
    (finding,) = report["findings"]
    assert finding["rule"] == "checkpoint-corrupt"
    assert "CRC-32" in finding["message"] and member.filename in finding["message"]


def test_truncated_file(healthy_pt):
    data = healthy_pt.read_bytes()
    healthy_pt.write_bytes(data[: len(data) // 2])
    code, report = verify_json(str(healthy_pt))
    assert code == 1
    assert "central directory" in report["findings"][0]["message"]


def test_empty_file_and_empty_dir(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.pt").write_bytes(b"")
    code, report = verify_json(str(tmp_path / "ckpt"))
    assert code == 1 and rules_of(report) == ["checkpoint-corrupt"]
    assert "empty (0 bytes)" in report["findings"][0]["message"]
    (tmp_path / "empty_ckpt").mkdir()
    code, report = verify_json(str(tmp_path / "empty_ckpt"))
    assert code == 1 and rules_of(report) == ["checkpoint-empty"]


def test_random_bytes_with_a_model_name(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(os.urandom(4096))
    code, report = verify_json(str(path))
    assert code == 1 and rules_of(report) == ["checkpoint-corrupt"]


# What a clone without git-lfs leaves in place of the weights (the pointer spec's three lines)
# and what a download that hit a login or error page saves.
LFS_POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    "size 102503217\n"
)
HTML_PAGE = "<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body></body></html>\n"


@pytest.mark.parametrize(
    "name, content, said",
    [
        ("model.safetensors", LFS_POINTER, "git-lfs pointer file, not the weights (102503217"),
        ("pytorch_model.bin", HTML_PAGE, "HTML or XML page, not the weights"),
    ],
)
def test_a_file_left_in_place_of_the_weights_is_named(tmp_path, name, content, said):
    path = tmp_path / name
    path.write_text(content)
    code, report = verify_json(str(path))
    assert code == 1 and rules_of(report) == ["checkpoint-corrupt"]
    assert said in report["findings"][0]["message"]


def test_storage_of_the_wrong_size(healthy_pt, tmp_path):
    # Rewrite the archive with one storage member cut short (valid CRC, wrong size).
    out = tmp_path / "short.pt"
    with (
        zipfile.ZipFile(healthy_pt) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target,
    ):
        shortened = False
        for info in source.infolist():
            data = source.read(info)
            if "/data/" in info.filename and len(data) >= 16 and not shortened:
                data, shortened = data[:-4], True
            target.writestr(info.filename, data)
    code, report = verify_json(str(out))
    assert code == 1
    assert "needs" in report["findings"][0]["message"]


def _zip_declaring(tmp_path, method, payload, *, compressed=None, uncompressed=None):
    """A one-member zip whose central directory declares other sizes than it holds."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        archive.writestr("archive/data/0", payload)
    data = bytearray(buffer.getvalue())
    directory = data.rfind(b"PK\x01\x02")
    for offset, size in ((20, compressed), (24, uncompressed)):
        if size is not None:
            data[directory + offset : directory + offset + 4] = size.to_bytes(4, "little")
    path = tmp_path / "bomb.pt"
    path.write_bytes(bytes(data))
    return path


def test_zip_bomb_declaring_sizes_beyond_the_file(tmp_path):
    path = _zip_declaring(
        tmp_path, zipfile.ZIP_STORED, b"x" * 64, compressed=2**31, uncompressed=2**31
    )
    code, report = verify_json(str(path))
    assert code == 1
    assert "beyond the file" in report["findings"][0]["message"]


def test_zip_bomb_declaring_a_size_no_real_tensor_deflates_to(tmp_path):
    path = _zip_declaring(tmp_path, zipfile.ZIP_DEFLATED, b"\0" * 4096, uncompressed=2**31)
    code, report = verify_json(str(path))
    assert code == 1
    assert "treated as a zip bomb and not inflated" in report["findings"][0]["message"]


def test_near_miss_a_deflated_checkpoint_of_zeros(tmp_path):
    """A real torch checkpoint zipped again with deflate: an all-zero tensor (fresh optimizer
    moments) deflates about 1030x, past the bomb ratio, and is still a whole checkpoint."""
    plain = tmp_path / "plain.pt"
    torch.save({"exp_avg": torch.zeros(2_500_000)}, plain)
    deflated = tmp_path / "deflated" / "model.pt"
    deflated.parent.mkdir()
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(deflated, "w") as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info), zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(deflated) as archive:
        zeros = max(archive.infolist(), key=lambda i: i.file_size)
    assert zeros.file_size > 1000 * zeros.compress_size
    code, report = verify_json(str(deflated.parent))
    assert code == 0, report["findings"]
    assert report["checkpoints"][0]["tensors"] == 1


def test_safetensors_healthy_and_truncated(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file(trained_state()["model"], str(path))
    code, report = verify_json(str(path))
    assert code == 0 and report["checkpoints"][0]["files"][0]["format"] == "safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    code, report = verify_json(str(path))
    assert code == 1 and rules_of(report) == ["checkpoint-corrupt"]
    assert (
        "past the" in report["findings"][0]["message"]
        or "buffer" in report["findings"][0]["message"]
    )


def test_safetensors_header_garbage(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(
        (40).to_bytes(8, "little") + b"{not json at all, garbage here....}!!!" + b"\0" * 64
    )
    code, report = verify_json(str(path))
    assert code == 1 and "not valid JSON" in report["findings"][0]["message"]


@pytest.fixture
def dcp_dir(tmp_path):
    path = tmp_path / "dcp_checkpoint"
    dcp.save(trained_state(), checkpoint_id=str(path))
    return path


def test_dcp_healthy(dcp_dir):
    code, report = verify_json(str(dcp_dir))
    assert code == 0, report["findings"]
    assert report["checkpoints"][0]["kind"] == "dcp"


def test_dcp_shard_truncated_and_missing(dcp_dir, tmp_path):
    shard = next(dcp_dir.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    code, report = verify_json(str(dcp_dir))
    assert code == 1 and "truncated" in report["findings"][0]["message"]
    shard.unlink()
    code, report = verify_json(str(dcp_dir))
    assert "missing" in report["findings"][0]["message"]


def test_legacy_torch_format(tmp_path):
    path = tmp_path / "legacy.pt"
    torch.save(trained_state()["model"], path, _use_new_zipfile_serialization=False)
    code, report = verify_json(str(path))
    assert code == 0, report["findings"]
    assert report["checkpoints"][0]["files"][0]["format"] == "torch-legacy"


def test_checkpoint_is_byte_identical_afterwards(healthy_pt):
    before = {p: p.read_bytes() for p in healthy_pt.parent.rglob("*") if p.is_file()}
    mtimes = {p: p.stat().st_mtime for p in before}
    verify_json(str(healthy_pt.parent))
    assert {p: p.read_bytes() for p in before} == before
    assert {p: p.stat().st_mtime for p in before} == mtimes
    shutil.rmtree(healthy_pt.parent)
