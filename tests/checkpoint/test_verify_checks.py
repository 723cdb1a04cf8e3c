"""Value and layout checks: nonfinite, DDP prefix, optimizer mismatch, --against, --all."""

from __future__ import annotations

import json
import shutil

import torch
from ckpt_helpers import Net, rules_of, trained_state, verify_json
from conftest import experiment_dir
from safetensors.torch import save_file


def findings(report: dict, rule: str) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == rule]


def test_nonfinite_weights_and_optimizer_state_are_named_and_counted(tmp_path):
    state = trained_state()
    state["model"]["fc1.weight"][0, :3] = float("nan")
    exp_avg = state["optimizer"]["state"][0]["exp_avg"]
    exp_avg[1, 1] = float("inf")
    path = tmp_path / "checkpoint.pt"
    torch.save(state, path)
    code, report = verify_json(str(path))
    assert code == 1
    (finding,) = findings(report, "checkpoint-nonfinite")
    assert "model.fc1.weight (3 of 32)" in finding["message"]
    assert "optimizer.state.0.exp_avg (1 of 32)" in finding["message"]


def test_nonfinite_bfloat16_and_safetensors(tmp_path):
    weights = {"w": torch.ones(8, dtype=torch.bfloat16)}
    weights["w"][2] = float("inf")
    save_file(weights, str(tmp_path / "m.safetensors"))
    torch.save(weights, tmp_path / "m.pt")
    for name in ("m.safetensors", "m.pt"):
        _, report = verify_json(str(tmp_path / name))
        (finding,) = findings(report, "checkpoint-nonfinite")
        assert "w (1 of 8)" in finding["message"], name


def test_near_miss_finite_values_and_integer_tensors(tmp_path):
    path = tmp_path / "ok.pt"
    torch.save({"w": torch.randn(4), "steps": torch.tensor([2**31], dtype=torch.int64)}, path)
    code, report = verify_json(str(path))
    assert code == 0 and report["findings"] == []


def test_ddp_prefix(tmp_path):
    state = {f"module.{k}": v for k, v in trained_state()["model"].items()}
    torch.save(state, tmp_path / "ddp.pt")
    code, report = verify_json(str(tmp_path / "ddp.pt"))
    assert code == 0, "a warning"
    (finding,) = findings(report, "state-dict-prefix")
    assert "module.fc1.weight" in finding["message"]
    assert "removeprefix" in finding["fix"]


def test_near_miss_a_submodule_named_module_list(tmp_path):
    state = {"module_list.0.weight": torch.ones(2), "head.weight": torch.ones(2)}
    torch.save(state, tmp_path / "m.pt")
    _, report = verify_json(str(tmp_path / "m.pt"))
    assert not findings(report, "state-dict-prefix")


def test_optimizer_from_another_model(tmp_path):
    state = trained_state(hidden=8)
    state["optimizer"] = trained_state(hidden=16)["optimizer"]
    torch.save(state, tmp_path / "mixed.pt")
    _, report = verify_json(str(tmp_path / "mixed.pt"))
    (finding,) = findings(report, "optimizer-mismatch")
    assert "[16, 4]" in finding["message"] and "[8, 4]" in finding["message"]


def test_optimizer_with_missing_parameters(tmp_path):
    state = trained_state()
    model = Net()
    frozen = torch.optim.SGD(list(model.parameters())[:2], lr=0.1)
    state["optimizer"] = frozen.state_dict()
    torch.save(state, tmp_path / "fewer.pt")
    _, report = verify_json(str(tmp_path / "fewer.pt"))
    (finding,) = findings(report, "optimizer-mismatch")
    assert "covers 2 parameters but the model state dict has 6" in finding["message"]


def test_near_miss_matching_optimizer_with_batchnorm_buffers(tmp_path):
    torch.save(trained_state(), tmp_path / "ok.pt")
    _, report = verify_json(str(tmp_path / "ok.pt"))
    assert not findings(report, "optimizer-mismatch")


def test_against_a_reference_names_missing_and_reshaped_keys(tmp_path):
    torch.save(trained_state(hidden=8), tmp_path / "reference.pt")
    torch.save(trained_state(hidden=16), tmp_path / "candidate.pt")
    code, report = verify_json(
        str(tmp_path / "candidate.pt"), "--against", str(tmp_path / "reference.pt")
    )
    assert code == 1
    (finding,) = findings(report, "state-dict-mismatch")
    assert (
        "17 reshaped" in finding["message"] and "model.fc1.bias [8] -> [16]" in finding["message"]
    )
    _, same = verify_json(
        str(tmp_path / "reference.pt"), "--against", str(tmp_path / "reference.pt")
    )
    assert not findings(same, "state-dict-mismatch")


def test_all_picks_the_latest_restorable_checkpoint(fixtures):
    exp = experiment_dir(fixtures, "tune_corrupt_checkpoint")
    code, report = verify_json(str(exp), "--all")
    assert code == 1
    (latest,) = report["latest_restorable"]
    names = [c["path"].rsplit("/", 1)[-1] for c in report["checkpoints"]]
    broken = [c["path"].rsplit("/", 1)[-1] for c in report["checkpoints"] if c["problems"]]
    assert broken == [names[-1]], "the truncated newest one"
    assert latest["checkpoint"].endswith(names[-2])
    assert rules_of(report) == ["checkpoint-corrupt"]


def test_all_on_a_healthy_sweep_is_clean(fixtures):
    code, report = verify_json(
        str(experiment_dir(fixtures, "tune_healthy")), "--all", "--against", "previous"
    )
    assert code == 0, report["findings"]
    assert len(report["latest_restorable"]) == 3
    assert all(item["checkpoint"] for item in report["latest_restorable"])


def test_all_on_train_v2_with_a_deleted_checkpoint(fixtures, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(experiment_dir(fixtures, "train_v2_healthy"), run)
    snapshot = json.loads((run / "checkpoint_manager_snapshot.json").read_text())
    gone = snapshot["latest_checkpoint_result"]["checkpoint_dir_name"]
    shutil.rmtree(run / gone)
    code, report = verify_json(str(run), "--all")
    assert code == 1
    (finding,) = findings(report, "snapshot-dangling")
    assert gone in finding["message"] and "checkpoint_manager_snapshot.json" in finding["message"]


def test_near_miss_all_on_intact_train_v2(fixtures):
    code, report = verify_json(str(experiment_dir(fixtures, "train_v2_healthy")), "--all")
    assert code == 0 and not findings(report, "snapshot-dangling")
