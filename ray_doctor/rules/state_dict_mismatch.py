"""state-dict-mismatch: a checkpoint's weights do not fit the model they are loaded into."""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment, Failure
from ray_doctor.rules._base import subject_name
from ray_doctor.rules._signature import (
    Hit,
    SignatureRule,
    hit_text,
    lines_matching,
    signatures,
    wording,
)

LOAD_STATE_DICT = "torch nn.Module.load_state_dict (torch/nn/modules/module.py)"
TF_KEY = "TensorFlow variable not in checkpoint"
MISMATCH = signatures(
    wording(
        "load_state_dict",
        r"Error\(s\) in loading state_dict for (\w+)",
        LOAD_STATE_DICT,
        "torch 0.4-2.13",
        "RuntimeError: Error(s) in loading state_dict for Net:",
    ),
    # TensorFlow's Saver / tf.train.Checkpoint restoring a graph variable the checkpoint does
    # not hold (a slot variable of another optimizer, a renamed scope; google/automl #683).
    wording(
        TF_KEY,
        r"Key \S+ not found in checkpoint",
        "TensorFlow's tensor bundle reader (tensorflow/core/util/tensor_bundle/tensor_bundle.cc) "
        "through Saver.restore / RestoreV2",
        "TensorFlow 1.x-2.x",
        "tensorflow.python.framework.errors_impl.NotFoundError: Key box_net/box-0-bn-3/beta/"
        "Momentum not found in checkpoint",
    ),
    wording(
        "missing keys",
        r"Missing key\(s\) in state_dict",
        LOAD_STATE_DICT,
        "torch 0.4-2.13",
        'Missing key(s) in state_dict: "fc.weight", "fc.bias".',
    ),
    wording(
        "unexpected keys",
        r"Unexpected key\(s\) in state_dict|unexpected key \"[^\"]+\" in state_dict|"
        r"missing keys in state_dict",
        LOAD_STATE_DICT,
        "torch 0.2-2.13 (KeyError 'unexpected key \"...\" in state_dict' before 0.4)",
        'Unexpected key(s) in state_dict: "module.fc.weight".',
    ),
    wording(
        "size mismatch",
        r"size mismatch for ([\w.]+): copying a param with shape",
        LOAD_STATE_DICT,
        "torch 1.0-2.13",
        "size mismatch for fc.weight: copying a param with shape torch.Size([10, 512]) from "
        "checkpoint, the shape in current model is torch.Size([2, 512]).",
    ),
    wording(
        "size mismatch (torch 0.4)",
        r"size mismatch for ([\w.]+): copying a param of .{0,120} from checkpoint, where the "
        r"shape is",
        LOAD_STATE_DICT,
        "torch 0.4 (and loaders that copy its text)",
        "size mismatch for stem.conv.weight: copying a param of torch.Size([64, 3, 7, 7]) from "
        "checkpoint, where the shape is torch.Size([16, 3, 3, 3]) in current model.",
    ),
    wording(
        "distributed checkpoint size mismatch",
        r"Size mismatch between saved torch\.Size\(\[[^]]*\]\) and current: torch\.Size",
        "torch.distributed.checkpoint load planner "
        "(torch/distributed/checkpoint/default_planner.py)",
        "torch 2.0-2.13",
        "ValueError: Size mismatch between saved torch.Size([257152, 2048]) and current: "
        "torch.Size([131661824]) for model.embed_tokens.weight",
    ),
    wording(
        "distributed checkpoint keys",
        r"Missing key in checkpoint state_dict: \S|An unexpected key, \S+, exists\. FQN is|"
        r"\breq \S+ mismatch sizes torch\.Size",
        "torch.distributed.checkpoint: the strict load planner (default_planner.py), "
        "set_model_state_dict (state_dict.py), the filesystem reader (filesystem.py)",
        "torch 1.13-2.13",
        "RuntimeError: Missing key in checkpoint state_dict: model.layers.0.mlp.gate_proj.weight.",
    ),
    wording(
        "TensorFlow restore: graph and checkpoint differ",
        r"Restoring from checkpoint failed\. This is most likely due to a mismatch between the "
        r"current graph and the graph from the checkpoint|Assign requires shapes of both "
        r"tensors to match\. lhs shape= \[[^]]*\] rhs shape= \[",
        "TensorFlow 1.x Saver.restore (tensorflow/python/training/saver.py) and its Assign op",
        "TensorFlow 1.13-2.x",
        "InvalidArgumentError: Restoring from checkpoint failed. This is most likely due to a "
        "mismatch between the current graph and the graph from the checkpoint.",
    ),
    wording(
        "optimizer param groups",
        r"loaded state dict contains a parameter group that doesn't match the size of "
        r"optimizer's group|loaded state dict has a different number of parameter groups",
        "torch.optim.Optimizer.load_state_dict (torch/optim/optimizer.py)",
        "torch 1.0-2.13",
        "ValueError: loaded state dict contains a parameter group that doesn't match the size of "
        "optimizer's group",
    ),
    wording(
        "transformers size mismatch",
        r"You may consider adding `ignore_mismatched_sizes=True`",
        "Hugging Face transformers PreTrainedModel.from_pretrained",
        "transformers 4.x",
        "You may consider adding `ignore_mismatched_sizes=True` in the model `from_pretrained` "
        "method.",
    ),
)
UNEXPECTED = re.compile(r"Unexpected key\(s\) in state_dict: (.*)")
MISSING = re.compile(r"Missing key\(s\) in state_dict: (.*)")
SIZE = re.compile(
    r"size mismatch for ([\w.]+): copying a param with shape (torch\.Size\(\[[^]]*\]\)) from checkpoint, the shape in current model is (torch\.Size\(\[[^]]*\]\))"
)
KEY = re.compile(r'"([^"]+)"')
# What a partitioned (ZeRO-3 / FSDP) parameter holds in place of its weight.
PLACEHOLDERS = frozenset({"torch.Size([0])", "torch.Size([1])"})


class StateDictMismatch(SignatureRule):
    """Loading a checkpoint failed because its keys or shapes do not match the model.

    Symptom:
        `RuntimeError: Error(s) in loading state_dict for <Model>` with "Missing key(s)",
        "Unexpected key(s)" or "size mismatch for ..." when a trial restores or a script loads
        a checkpoint.
    Likely cause:
        The most common case: the checkpoint was saved from a DDP-wrapped model
        (`model.state_dict()` on `DistributedDataParallel`), so every key starts with
        `module.`, and it is loaded into the bare model (or the other way round). Otherwise
        the model's code or hyper-parameters (layer sizes) changed since the checkpoint was
        written.
    Evidence it uses:
        In `inspect`: the load_state_dict error text: which keys are missing or unexpected,
        and which shapes differ. In `verify-checkpoint --against REF`: the keys and shapes of
        the checkpoint against a reference checkpoint, before any restore tries. Silent when
        no key differs and one side of every size mismatch is a sharded parameter's
        placeholder (`torch.Size([0])`, or `[1]` in older DeepSpeed) against a
        multi-dimensional weight on the other: a DeepSpeed ZeRO-3 or FSDP save or load that
        did not gather the parameters, which no change to the model fixes; the error is
        reported with its text.
    Fix:
        Save `model.module.state_dict()` from DDP (in Ray Train, the model returned by
        `prepare_model` is wrapped). To load an old checkpoint, strip the prefix:
        `{k.removeprefix("module."): v for k, v in state.items()}`. For shape changes, build
        the model with the hyper-parameters the checkpoint was trained with, or load with
        `strict=False` only for parts you mean to re-initialise.
    References:
        - https://pytorch.org/tutorials/beginner/saving_loading_models.html
        - https://docs.ray.io/en/latest/train/user-guides/checkpoints.html
    """

    id = "state-dict-mismatch"
    title = "Checkpoint does not match the model"
    severity = Severity.ERROR
    commands = ("inspect", "verify-checkpoint")
    verify_fix = (
        "Restore into a model built like the one that saved the checkpoint, or adapt the state "
        "dict first (rename keys, drop or re-initialise the parts that changed)."
    )
    example = "fixtures/tune_state_dict_mismatch"
    signatures = MISMATCH

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        # No key missing or unexpected, and one side of every size mismatch a partitioned
        # parameter's placeholder: DeepSpeed ZeRO-3 and FSDP keep torch.Size([0]) (or [1] in
        # older DeepSpeed) in place of a sharded weight, so a save without gathering writes
        # them (transformers #20082) and a load into the sharded model finds them (Lightning
        # #7282). The model matches the checkpoint; building it differently, this rule's fix,
        # would not help. A multi-dimensional weight against a placeholder is the proof: a
        # change of layer sizes keeps a weight's dimensions.
        for named in (UNEXPECTED, MISSING):
            if next(lines_matching(named, experiment, failure), None):
                return False
        pairs = [
            (saved, current)
            for _, text, _ in lines_matching(SIZE, experiment, failure)
            for _, saved, current in SIZE.findall(text)
        ]
        for side in (0, 1):
            if pairs and all(pair[side] in PLACEHOLDERS for pair in pairs):
                return any(pair[1 - side].count(",") >= 1 for pair in pairs)
        return False

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        text = hit_text(hit)
        unexpected = _keys(UNEXPECTED, text)
        missing = _keys(MISSING, text)
        sizes = SIZE.findall(text)
        who = subject_name(experiment, hit.trial)
        ddp_saved = unexpected and all(k.startswith("module.") for k in unexpected)
        ddp_loaded = missing and all(k.startswith("module.") for k in missing)
        if ddp_saved:
            message = (
                f"{who} could not load a checkpoint saved from a DDP-wrapped model: every "
                f"unexpected key starts with `module.` ({', '.join(unexpected[:3])})."
            )
            fix = (
                "Save `model.module.state_dict()` when the model is wrapped in DDP; to load the "
                "existing checkpoint, strip the prefix: "
                '`{k.removeprefix("module."): v for k, v in state.items()}`.'
            )
        elif ddp_loaded:
            message = (
                f"{who} loaded a plain checkpoint into a DDP-wrapped model: the missing keys start "
                f"with `module.` ({', '.join(missing[:3])})."
            )
            fix = "Load into `model.module` (the unwrapped model), or add the `module.` prefix."
        else:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing[:3])}")
            if unexpected:
                parts.append(f"unexpected {', '.join(unexpected[:3])}")
            for name, saved, current in sizes[:3]:
                parts.append(f"{name} is {saved} in the checkpoint but {current} in the model")
            detail = "; ".join(parts) or hit.evidence.excerpt
            message = f"{who} could not load a checkpoint into its model: {detail.strip()}."
            fix = (
                "Build the model with the hyper-parameters the checkpoint was trained with (or "
                "restore a checkpoint made by this version of the model); use `strict=False` only "
                "for layers you mean to re-initialise."
            )
            if hit.signature.label == TF_KEY:
                fix = (
                    "The graph has a variable the checkpoint lacks (often another optimizer's "
                    "slots, or a renamed scope): restore only what the checkpoint holds "
                    "(`tf.train.Saver(var_list=...)`, `tf.train.init_from_checkpoint` with a "
                    "map, or `tf.train.Checkpoint(...).restore(path).expect_partial()`), or "
                    "build the model as the checkpoint was trained."
                )
        return message, fix


def _keys(pattern: re.Pattern[str], text: str) -> list[str]:
    match = pattern.search(text)
    return KEY.findall(match.group(1)) if match else []
