"""optimizer-mismatch (verify-checkpoint): optimizer state does not fit the model saved with it."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import VerifyRule


class OptimizerMismatch(VerifyRule):
    """The optimizer state covers a different number or shape of parameters than the model.

    Symptom:
        Resuming fails in `optimizer.load_state_dict` ("loaded state dict contains a parameter
        group that doesn't match the size of optimizer's group") or, worse, loads and applies
        moment estimates to the wrong parameters.
    Likely cause:
        The model changed (layers added, removed or resized, some frozen) after the optimizer
        was created, or the optimizer state of another model was saved next to this one.
    Evidence it uses:
        The model state dict and the optimizer state dict in the same checkpoint: the number
        of parameters in `param_groups`, and the shape of each parameter's first state tensor
        (e.g. `exp_avg`) against the model's parameters in order (buffers such as
        `running_mean` are not parameters).
    Fix:
        Save model and optimizer state from the same objects at the same time; after changing
        the model, start the optimizer fresh (do not load the old state).
    References:
        - https://pytorch.org/tutorials/recipes/recipes/saving_and_loading_a_general_checkpoint.html
        - https://docs.ray.io/en/latest/train/user-guides/checkpoints.html
    """

    id = "optimizer-mismatch"
    title = "Optimizer state does not match the model"
    example = "fixtures/checkpoints/optimizer_mismatch"
    severity = Severity.WARNING
    verify_fix = (
        "Save model and optimizer state from the same objects at the same step; if the model "
        "changed, create the optimizer anew instead of loading the old state."
    )
