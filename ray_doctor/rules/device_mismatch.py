"""device-mismatch: tensors on different devices met in one operation."""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment
from ray_doctor.rules._base import subject_name
from ray_doctor.rules._signature import Hit, SignatureRule, first_match, signatures, wording

MISMATCH = signatures(
    wording(
        "same device",
        r"Expected all tensors to be on the same device",
        "torch ATen device checks (aten/src/ATen/TensorUtils.cpp, native/TensorCompare)",
        "torch 1.6-2.13",
        "RuntimeError: Expected all tensors to be on the same device, but found at least two "
        "devices, cuda:0 and cpu!",
    ),
    wording(
        "index on another device",
        r"indices should be either on cpu or on the same device as the indexed tensor",
        "torch advanced indexing (aten/src/ATen/native/TensorAdvancedIndexing.cpp; torch_xla "
        "the same words)",
        "torch 1.5-2.13",
        "RuntimeError: indices should be either on cpu or on the same device as the indexed "
        "tensor (cuda:1)",
    ),
    wording(
        "expected device",
        r"Tensor on device (\S+) is not on the expected device (\S+?)!?$",
        "torch ATen (aten/src/ATen/native/cuda)",
        "torch 1.x-2.13",
        "RuntimeError: Tensor on device cpu is not on the expected device meta!",
    ),
    wording(
        "input/weight type",
        # Only when one side is on the GPU and the other not: the same check compares dtypes
        # too ("torch.cuda.HalfTensor" and "torch.cuda.FloatTensor" is a dtype mismatch).
        r"Input type \(((?=[^)]*(?:cuda|CUDA))[^)]+)\) and weight type \(((?![^)]*(?:cuda|CUDA))[^)]+)\) "
        r"should be the same|Input type \(((?![^)]*(?:cuda|CUDA))[^)]+)\) and weight type "
        r"\(((?=[^)]*(?:cuda|CUDA))[^)]+)\) should be the same",
        "torch convolution (aten/src/ATen/native/Convolution.cpp)",
        "torch 1.0-2.13",
        "RuntimeError: Input type (torch.FloatTensor) and weight type "
        "(torch.cuda.FloatTensor) should be the same",
    ),
    wording(
        "same device",
        # ATen's and torch.distributed's other device checks, each naming both sides.
        r"Expected tensor to have CUDA Backend, but got tensor with CPU Backend|"
        r"Tensors must be CUDA and dense|No backend type associated with device type cpu|"
        r"module must have its parameters and buffers on device \S+ \(device_ids\[0\]\) but "
        r"found one of them on device|input module must be on the same type of devices|"
        r"Tensors of the same index must be on the same device|"
        r"Expected \w+ and \w+ to be on the same device, but found|"
        r"expected device \S+ but got device \S+ for value tensor|"
        r"Expected a '(?:cuda|cpu)' device type for generator but found|"
        # MPS: an operand still on the CPU (aten/src/ATen/native/mps/OperationUtils.mm).
        r"Placeholder storage has not been allocated on MPS device",
        "torch: ATen (TensorUtils.cpp checkBackend, index_put, linalg, Generator), c10d "
        "(ProcessGroupNCCL, ProcessGroup::getBackend), nn.DataParallel / DDP, the fused and "
        "foreach optimizers",
        "torch 1.x-2.13",
        "RuntimeError: module must have its parameters and buffers on device cuda:0 "
        "(device_ids[0]) but found one of them on device: cpu",
    ),
    wording(
        "device type",
        r"Expected object of device type (\w+) but got device type (\w+)",
        "torch ATen (checked_dense_tensor_unwrap)",
        "torch 1.0-1.5",
        "RuntimeError: Expected object of device type cuda but got device type cpu for argument "
        "#1 'self' in call to _thnn_nll_loss_forward",
    ),
    wording(
        "backend",
        r"Expected object of backend (\w+) but got backend (\w+)",
        "torch ATen (checked_tensor_unwrap)",
        "torch 0.4-1.2",
        "RuntimeError: Expected object of backend CUDA but got backend CPU for argument #2",
    ),
    wording(
        "device N does not equal M",
        r"to have the same device as tensor for argument #\d+ '?\w*'?; but device (\d+) does "
        r"not equal (\d+)",
        "torch ATen checkSameGPU (aten/src/ATen/TensorUtils.cpp)",
        "torch 1.0-1.x",
        "RuntimeError: Expected tensor for 'out' to have the same device as tensor for argument "
        "#2 'mat1'; but device 1 does not equal 3 (while checking arguments for addmm)",
    ),
    wording(
        "not at the same device",
        r"Input and parameter tensors are not at the same device|"
        r"Input and hidden tensors are not at the same device",
        "torch RNN (aten/src/ATen/native/RNN.cpp)",
        "torch 1.x-2.13",
        "RuntimeError: Input and parameter tensors are not at the same device, found input "
        "tensor at cpu and parameter tensor at cuda:0",
    ),
)
# Both wordings of the first check: "found at least two devices, A and B" (torch 1.6-2.x) and
# "but got mat1 is on A, different from other tensors on B" (seen from torch 2.11 on an H100).
DEVICES = re.compile(
    r"found at least two devices, ([\w:]+) and ([\w:]+)|"
    r"but got \w+ is on ([\w:]+), different from other tensors on ([\w:]+)"
)
FSDP_LABEL = "FSDP compute device"
# FSDP checks each flat parameter against the device it computes on (torch/distributed/fsdp/
# _flat_param.py, `_check_on_compute_device`; later versions add ", was on ..."). The compute
# device is the current CUDA device when FSDP wrapped the model unless `device_id` says.
FSDP_DEVICE = signatures(
    wording(
        FSDP_LABEL,
        r"Expects tensor to be on the compute device (cuda:\d+|\w+)(?:, was on (\w+(?::\d+)?))?",
        "torch FSDP (torch/distributed/fsdp/flat_param.py, _flat_param.py: "
        "_check_on_compute_device)",
        "torch 1.12-2.13",
        "AssertionError: Expects tensor to be on the compute device cuda:0, was on cpu",
    ),
)


class DeviceMismatch(SignatureRule):
    """An operation got tensors on different devices (e.g. the model on GPU, the batch on CPU).

    Symptom:
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0
        and cpu!", or older and related wordings: "Input type (torch.cuda.FloatTensor) and weight
        type (torch.FloatTensor) should be the same", "Expected object of device type cuda but
        got device type cpu", "Tensor on device meta is not on the expected device cpu!".
    Likely cause:
        Manual device handling: the model was moved to the GPU but a batch (or a tensor made
        inside `forward`, or a loss weight) was not, or the other way round; or a checkpoint
        was loaded onto another device than the model's.
    Evidence it uses:
        The error text in error.txt, the driver log or the worker logs; the two devices when
        the text names them.
    Fix:
        Let Ray Train place things: `ray.train.torch.prepare_model(model)` and
        `prepare_data_loader(loader)` (or move each batch with
        `batch.to(ray.train.torch.get_device())`); create new tensors with `device=x.device`;
        load checkpoints with `map_location=`.
    References:
        - https://docs.ray.io/en/latest/train/api/doc/ray.train.torch.prepare_model.html
        - https://docs.ray.io/en/latest/train/getting-started-pytorch.html
    """

    id = "device-mismatch"
    title = "Tensors on different devices"
    severity = Severity.ERROR
    example = "fixtures/tune_device_mismatch"
    signatures = MISMATCH + FSDP_DEVICE

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        if hit.signature.label == FSDP_LABEL:
            return self._fsdp(experiment, hit)
        devices = first_match(hit, DEVICES)
        if devices:
            pair = " and ".join(g for g in devices.groups() if g)
        elif hit.match.groups():
            pair = " and ".join(g for g in hit.match.groups() if g)
        else:
            pair = "two devices"
        message = (
            f"{subject_name(experiment, hit.trial)} mixed tensors on {pair} in one operation "
            f"({hit.evidence.excerpt})."
        )
        if hit.failure and hit.failure.user_frame:
            frame = hit.failure.user_frame
            message += f" It happened in {frame.function} ({frame.file}:{frame.line})."
        fix = (
            "Let Ray Train place the model and data (`ray.train.torch.prepare_model`, "
            "`prepare_data_loader`) or move every batch with "
            "`.to(ray.train.torch.get_device())`; create new tensors with `device=x.device` and "
            "load checkpoints with `map_location=`."
        )
        return message, fix

    @staticmethod
    def _fsdp(experiment: Experiment, hit: Hit) -> tuple[str, str]:
        compute, actual = hit.match.group(1), hit.match.group(2)
        where = f", but one was on {actual}" if actual else ""
        message = (
            f"{subject_name(experiment, hit.trial)} had FSDP expect its parameters on its "
            f"compute device {compute}{where} ({hit.evidence.excerpt})."
        )
        fix = (
            "Set each process's GPU before wrapping the model: "
            "`torch.cuda.set_device(local_rank)` (Ray Train's `prepare_model` does), or pass "
            "`device_id=` to FSDP; move parameters back to the GPU after offloading them to "
            "the CPU yourself."
        )
        return message, fix
