"""device-unavailable (smoke): a trial given GPUs cannot see or compute on them."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import SmokeRule


class DeviceUnavailable(SmokeRule):
    """Inside a real Tune trial that Ray gave GPUs, torch does not see them all, or a matmul
    on one of them fails or returns wrong numbers.

    Symptom:
        `CUDA_VISIBLE_DEVICES` is empty or shorter than the request, `torch.cuda.is_available()`
        is False or `torch.cuda.device_count()` is lower than the GPUs Ray assigned, CUDA fails
        to initialise, or a 1024 x 1024 matmul on a device raises or differs from the same
        product computed on the CPU.
    Likely cause:
        A CPU-only torch build on the node (`torch.version.cuda` is None), a driver too old
        for the torch CUDA build, `CUDA_VISIBLE_DEVICES` overridden by the job's environment,
        a GPU in a bad state (an Xid error, "GPU has fallen off the bus"), or
        `RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES` set so Ray no longer restricts devices.
    Evidence it uses:
        What the trial saw: `CUDA_VISIBLE_DEVICES`, torch's version and CUDA build, the device
        count, and each device's matmul result and error text.
    Fix:
        Install a CUDA build of torch that matches the node's driver (`nvidia-smi` shows the
        driver's CUDA version), do not set `CUDA_VISIBLE_DEVICES` yourself inside Ray tasks,
        and drain a node whose GPU errors (`dmesg | grep -i xid`). Request GPUs explicitly
        (`tune.with_resources(..., {"gpu": 1})`, `ScalingConfig(use_gpu=True)`), or training
        silently runs on the CPU.
    References:
        - https://docs.ray.io/en/latest/ray-core/scheduling/accelerators.html
        - https://pytorch.org/get-started/locally/
    """

    id = "device-unavailable"
    title = "GPU not visible or not computing in a trial"
    severity = Severity.ERROR
    example_note = (
        "needs a node with a GPU that torch cannot use, which CI does not have; "
        "tests/rules/test_device_unavailable.py runs the real probe with `--gpus 1` semantics on "
        "a CPU-only torch build and checks the finding it makes"
    )
