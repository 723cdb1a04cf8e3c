"""checkpoint-unsafe: hand-made malicious pickles are flagged and never run.

Each payload, if anything unpickled it, would create a canary file in a temp dir (nothing
worse). Every variant must be flagged, and the canary must never appear.
"""

from __future__ import annotations

import pickle
import zipfile

import pytest
import torch
from ckpt_helpers import rules_of, trained_state, verify_json


class Payload:
    def __init__(self, canary: str) -> None:
        self.canary = canary

    def __reduce__(self):
        return (open, (self.canary, "w"))


def protocol0_text(canary: str) -> bytes:
    # GLOBAL builtins.open, called with (canary, 'w'): the classic text-protocol payload.
    return f"cbuiltins\nopen\n(V{canary}\nVw\ntR.".encode()


def stack_global_with_memo(canary: str) -> bytes:
    # Protocol 4: module and name strings memoised first, fetched back for STACK_GLOBAL,
    # the trick that slips past scanners looking only at the two previous opcodes.
    body = bytearray(b"\x80\x04")
    for index, text in enumerate((b"builtins", b"open")):
        body += (
            b"\x8c" + bytes([len(text)]) + text + b"q" + bytes([index])
        )  # SHORT_BINUNICODE, BINPUT
    body += b"0"  # POP
    body += b"0"  # POP
    body += b"h\x00h\x01\x93"  # BINGET 0, BINGET 1, STACK_GLOBAL
    path = canary.encode()
    body += b"\x8c" + bytes([len(path)]) + path + b"\x8c\x01w\x86R."  # args, TUPLE2, REDUCE, STOP
    return bytes(body)


VARIANTS = {
    "plain.pkl": lambda c: pickle.dumps(Payload(c), protocol=4),
    "protocol0.pkl": protocol0_text,
    "stack_global_memo.pt": stack_global_with_memo,
    "disguised.safetensors": lambda c: pickle.dumps(Payload(c), protocol=2),
    "disguised_model.bin": lambda c: pickle.dumps({"weight": Payload(c)}, protocol=3),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_malicious_pickle_is_flagged_and_never_runs(tmp_path, name):
    canary = tmp_path / "CANARY"
    path = tmp_path / name
    path.write_bytes(VARIANTS[name](str(canary)))
    code, report = verify_json(str(path))
    assert code == 1
    assert "checkpoint-unsafe" in rules_of(report)
    finding = next(f for f in report["findings"] if f["rule"] == "checkpoint-unsafe")
    assert "open`" in finding["message"] and "known code-execution route" in finding["message"]
    assert not canary.exists()


def test_payload_inside_a_real_torch_zip(healthy_pt, tmp_path):
    canary = tmp_path / "CANARY"
    evil = tmp_path / "evil.pt"
    with (
        zipfile.ZipFile(healthy_pt) as source,
        zipfile.ZipFile(evil, "w", zipfile.ZIP_STORED) as target,
    ):
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("data.pkl"):
                data = pickle.dumps(Payload(str(canary)), protocol=2)
            target.writestr(info.filename, data)
    code, report = verify_json(str(evil), "--values")
    assert code == 1
    finding = next(f for f in report["findings"] if f["rule"] == "checkpoint-unsafe")
    assert "data.pkl" in finding["message"] and "open`" in finding["message"]
    assert not canary.exists()


def test_payload_in_a_legacy_torch_file(tmp_path):
    canary = tmp_path / "CANARY"
    path = tmp_path / "legacy.pt"
    torch.save(
        {"w": torch.ones(2), "x": Payload(str(canary))}, path, _use_new_zipfile_serialization=False
    )
    canary.unlink(missing_ok=True)
    _, report = verify_json(str(path))
    assert "checkpoint-unsafe" in rules_of(report)
    assert not canary.exists()


def test_near_miss_real_state_dicts_are_safe(healthy_pt):
    _, report = verify_json(str(healthy_pt))
    assert "checkpoint-unsafe" not in rules_of(report)


def test_near_miss_plain_containers_pickle(tmp_path):
    path = tmp_path / "metrics.pkl"
    path.write_bytes(pickle.dumps({"epoch": 3, "losses": [0.5, 0.25], "tags": {"a", "b"}}))
    code, report = verify_json(str(path))
    assert code == 0 and report["findings"] == []


def test_named_global_is_reported_for_a_whole_object_pickle(tmp_path):
    # A model pickled whole (torch.save(model)) needs its class: not dangerous, not verifiable.
    path = tmp_path / "whole_model.pt"
    torch.save(torch.nn.Linear(2, 2), path)
    _, report = verify_json(str(path))
    finding = next(f for f in report["findings"] if f["rule"] == "checkpoint-unsafe")
    assert "torch.nn.modules.linear.Linear" in finding["message"]
    assert "not on the allowlist" in finding["message"]
    assert trained_state  # the helper module is shared with the other tests
