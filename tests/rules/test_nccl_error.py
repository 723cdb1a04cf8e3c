"""nccl-error: NCCL failures other than timeouts."""

from conftest import findings_of, inspect_json

UNHANDLED = (
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2\n"
    "ncclUnhandledCudaError: Call to CUDA function failed.\n"
    "Last error:\n"
    "Cuda failure 2 'out of memory'\n"
)


def test_unhandled_cuda_error_with_last_error():
    code, report = inspect_json("-", stdin=UNHANDLED)
    assert code == 1
    (finding,) = findings_of(report, "nccl-error")
    assert "unhandled CUDA error" in finding["message"]
    assert "NCCL 2.26.2" in finding["message"]


def test_system_error():
    text = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error, NCCL version 2.21.5\nncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "nccl-error")
    assert "/dev/shm" in finding["message"]


def test_near_miss_nccl_mentioned_in_a_healthy_line():
    text = "INFO: NCCL_SOCKET_IFNAME set to eth0; using NCCL version 2.21.5\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "nccl-error")
