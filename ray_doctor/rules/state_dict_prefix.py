"""state-dict-prefix (verify-checkpoint): every key carries DDP's `module.` prefix."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import VerifyRule


class StateDictPrefix(VerifyRule):
    """The state dict was saved from a DDP-wrapped model: every key starts with `module.`.

    Symptom:
        All keys of a saved state dict look like `module.fc.weight`; loading it into the bare
        model fails with "Unexpected key(s) in state_dict: module...." (`state-dict-mismatch`
        when inspect sees it happen).
    Likely cause:
        `model.state_dict()` was called on the `DistributedDataParallel` wrapper (in Ray Train,
        the model `prepare_model` returns) instead of on the model inside it.
    Evidence it uses:
        The keys of each state dict found in the checkpoint.
    Fix:
        Save `model.module.state_dict()` (or `getattr(model, "module", model).state_dict()`).
        To load this checkpoint, strip the prefix:
        `{k.removeprefix("module."): v for k, v in state.items()}`.
    References:
        - https://docs.ray.io/en/latest/train/user-guides/checkpoints.html
        - https://pytorch.org/tutorials/beginner/saving_loading_models.html
    """

    id = "state-dict-prefix"
    title = "State dict saved from a DDP wrapper"
    example = "fixtures/checkpoints/ddp_prefix"
    severity = Severity.WARNING
    verify_fix = (
        "Save `model.module.state_dict()` from DDP; load this one with "
        '`{k.removeprefix("module."): v for k, v in state.items()}`.'
    )
