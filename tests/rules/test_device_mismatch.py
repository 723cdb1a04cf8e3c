"""device-mismatch: tensors on two devices in one operation."""

import pytest
from conftest import findings_of, inspect_json


def test_standard_wording_names_both_devices():
    text = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu! (when checking argument for argument mat1 in method wrapper_CUDA_addmm)\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "device-mismatch")
    assert "cuda:0 and cpu" in finding["message"]
    assert "prepare_model" in finding["fix"]


def test_older_wording():
    text = "RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same\n"
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "device-mismatch")


def test_near_miss_dtype_mismatch():
    text = "RuntimeError: expected scalar type Float but found Double\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "device-mismatch")


def test_torch_1_x_device_numbers_wording():
    """ATen's checkSameGPU in torch 1.x names device numbers (ray #30063, as posted)."""
    text = (
        "(BackendExecutor pid=5631) RuntimeError: Expected tensor for 'out' to have the same "
        "device as tensor for argument #2 'mat1'; but device 1 does not equal 3 (while checking "
        "arguments for addmm)\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert report["findings"][0]["rule"] == "device-mismatch"


def test_near_miss_conv_input_and_weight_of_two_dtypes_on_one_gpu():
    # The same check compares dtypes: a half input for a float conv on one GPU is no device
    # mismatch (torch/aten Convolution.cpp check_input_same_type_as_parameters).
    text = (
        "RuntimeError: Input type (torch.cuda.HalfTensor) and weight type "
        "(torch.cuda.FloatTensor) should be the same\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "device-mismatch")


@pytest.mark.parametrize(
    "line, said",
    [
        # torch 2.1 (pytorch #112658, as posted): rank 1 never set its CUDA device
        ("AssertionError: Expects tensor to be on the compute device cuda:1", "cuda:1"),
        # later torch names where the tensor was: parameters offloaded to the CPU by hand
        ("AssertionError: Expects tensor to be on the compute device cuda:0, was on cpu", "cpu"),
    ],
)
def test_fsdp_finds_a_parameter_off_its_compute_device(line, said):
    code, report = inspect_json("-", stdin=line + "\n")
    assert code == 1
    (finding,) = findings_of(report, "device-mismatch")
    assert said in finding["message"] and "set_device" in finding["fix"]
