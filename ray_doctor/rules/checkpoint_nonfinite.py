"""checkpoint-nonfinite (verify-checkpoint): NaN or Inf inside saved tensors."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import VerifyRule


class CheckpointNonfinite(VerifyRule):
    """Saved weights or optimizer state contain NaN or infinite values.

    Symptom:
        A run resumed from this checkpoint reports NaN losses from its first step, or a
        released model produces NaN outputs; `verify-checkpoint` names the tensors and counts
        the bad values.
    Likely cause:
        Training diverged before the checkpoint was written (learning rate too high, fp16
        overflow, no gradient clipping) and the checkpoint captured the damage; or the
        optimizer's moment estimates overflowed.
    Evidence it uses:
        The raw bytes of every floating-point tensor (float16/32/64, bfloat16, complex), read
        after the structure pass located them; no unpickler runs.
    Fix:
        Restore from an earlier checkpoint without non-finite values (check them with
        `ray-doctor verify-checkpoint --all` on the trial dir), then lower the learning rate,
        clip gradients or use bf16 / a `GradScaler`; guard saving with a finite-loss check.
    References:
        - https://pytorch.org/docs/stable/amp.html
        - https://docs.ray.io/en/latest/tune/tutorials/tune-trial-checkpoints.html
    """

    id = "checkpoint-nonfinite"
    title = "Non-finite values in the checkpoint"
    example = "fixtures/checkpoints/nonfinite"
    severity = Severity.ERROR
    verify_fix = (
        "Restore from an earlier checkpoint whose tensors are finite (`ray-doctor "
        "verify-checkpoint --all TRIAL_DIR`), then lower the learning rate, clip gradients or "
        "use bf16 / a GradScaler, and only save after a finite loss."
    )
