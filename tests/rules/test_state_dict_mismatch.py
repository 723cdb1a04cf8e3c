"""state-dict-mismatch: a DDP checkpoint restored into a bare model (real Ray 2.60 run)."""

import pytest
from conftest import experiment_dir, findings_of, inspect_json


def test_ddp_prefix_is_named(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_state_dict_mismatch")))
    assert code == 1
    (finding,) = findings_of(report, "state-dict-mismatch")
    assert (
        report["findings"][0] is not None and report["findings"][0]["rule"] == "state-dict-mismatch"
    )
    assert "DDP-wrapped model" in finding["message"] and "module.weight" in finding["message"]
    assert "removeprefix" in finding["fix"]


def test_shape_change_is_described():
    text = (
        "RuntimeError: Error(s) in loading state_dict for Linear:\n"
        "\tsize mismatch for weight: copying a param with shape torch.Size([2, 4]) from checkpoint, "
        "the shape in current model is torch.Size([3, 4]).\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "state-dict-mismatch")
    assert (
        "weight is torch.Size([2, 4]) in the checkpoint but torch.Size([3, 4]) in the model"
        in finding["message"]
    )


def test_near_miss_other_restore_failure(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_corrupt_checkpoint")))
    assert not findings_of(report, "state-dict-mismatch")


def test_torch_0_4_size_mismatch_wording():
    """torch 0.4's load_state_dict said 'copying a param of ... from checkpoint, where the
    shape is ...' (pycls #86: another architecture's weights)."""
    text = (
        "\tsize mismatch for stem.conv.weight: copying a param of torch.Size([64, 3, 7, 7]) from "
        "checkpoint, where the shape is torch.Size([16, 3, 3, 3]) in current model.\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert report["findings"][0]["rule"] == "state-dict-mismatch"


def test_near_miss_checkpoint_of_empty_tensors():
    """A ZeRO-3 / FSDP save without gathering writes torch.Size([0]) placeholders
    (transformers #20082): the model is right, the checkpoint holds no weights, so rebuilding
    the model (this rule's fix) would not help. Real torch text: an empty tensor per weight."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    empty = {key: torch.empty(0) for key in model.state_dict()}
    with pytest.raises(RuntimeError) as raised:
        model.load_state_dict(empty)
    text = f"RuntimeError: {raised.value}\n"
    assert "copying a param with shape torch.Size([0]) from checkpoint" in text
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "state-dict-mismatch")
    # One real weight among them is a real mismatch again.
    empty["0.weight"] = torch.zeros(5, 4)
    with pytest.raises(RuntimeError) as raised:
        model.load_state_dict(empty)
    _, report = inspect_json("-", stdin=f"RuntimeError: {raised.value}\n")
    (finding,) = findings_of(report, "state-dict-mismatch")
    assert "0.weight is torch.Size([5, 4]) in the checkpoint" in finding["message"]


def test_near_miss_loading_into_a_sharded_model():
    """The mirror case (Lightning #7282): a whole checkpoint loaded into a model whose
    parameters DeepSpeed ZeRO-3 replaced by 1-element placeholders. Real torch text."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(32, 2))
    whole = {key: value.clone() for key, value in model.state_dict().items()}
    for param in model.parameters():
        param.data = torch.ones(1)  # what older DeepSpeed leaves in a partitioned parameter
    with pytest.raises(RuntimeError) as raised:
        model.load_state_dict(whole)
    text = f"RuntimeError: {raised.value}\n"
    assert "the shape in current model is torch.Size([1])" in text
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "state-dict-mismatch")


def test_a_one_output_head_is_a_real_mismatch():
    """A classifier head changed from 2 outputs to 1 keeps its weight 2-D: a real change of
    hyper-parameters, not a placeholder."""
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError) as raised:
        torch.nn.Linear(32, 1).load_state_dict(torch.nn.Linear(32, 2).state_dict())
    _, report = inspect_json("-", stdin=f"RuntimeError: {raised.value}\n")
    (finding,) = findings_of(report, "state-dict-mismatch")
    assert (
        "weight is torch.Size([2, 32]) in the checkpoint but torch.Size([1, 32])"
        in finding["message"]
    )


def test_distributed_checkpoint_size_mismatch(tmp_path):
    """torch.distributed.checkpoint's load planner has its own wording (RLinf #655): real
    torch text from a DCP save loaded into a model of another size."""
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    dcp.save({"weight": torch.zeros(4, 8)}, checkpoint_id=str(tmp_path))
    with pytest.raises(BaseException) as raised:  # DCP's CheckpointException is a BaseException
        dcp.load({"weight": torch.zeros(32)}, checkpoint_id=str(tmp_path))
    text = f"ValueError: {raised.value}\n"
    assert "Size mismatch between saved torch.Size([4, 8]) and current" in text
    _, report = inspect_json("-", stdin=text)
    assert report["findings"][0]["rule"] == "state-dict-mismatch"


def test_a_tensorflow_variable_the_checkpoint_does_not_hold():
    """google/automl #683, as posted: the graph's Momentum slots are not in the checkpoint."""
    text = (
        "2 root error(s) found.\n"
        "  (0) Not found: Key box_net/box-0-bn-3/beta/Momentum not found in checkpoint\n"
        "         [[node save/RestoreV2 (defined at estimator.py:1493) ]]\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "state-dict-mismatch")
    assert "box_net/box-0-bn-3/beta/Momentum" in finding["message"]
    assert "expect_partial" in finding["fix"] and "strict=False" not in finding["fix"]


def test_near_miss_a_tensorflow_checkpoint_that_is_not_there():
    text = (
        "tensorflow.python.framework.errors_impl.NotFoundError: Failed to find any matching "
        "files for /ckpt/model.ckpt-1000\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "state-dict-mismatch")
