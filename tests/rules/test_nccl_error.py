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


def test_an_nccl_error_after_a_cuda_kernel_fault_is_its_consequence():
    """A device-side assert (timm #1077: a target index out of bounds) makes every later CUDA
    call fail, NCCL's included: the report names the assert, not NCCL."""
    text = (
        "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:276: operator(): block: "
        '[0,0,0], thread: [26,0,0] Assertion `idx_dim >= 0 && idx_dim < index_size && "index '
        'out of bounds"` failed.\n'
        "Traceback (most recent call last):\n"
        '  File "train.py", line 681, in train_one_epoch\n'
        "    loss = loss_fn(output, target)\n"
        "RuntimeError: CUDA error: device-side assert triggered\n"
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:181, unhandled "
        "cuda error, NCCL version 21.0.3\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert not findings_of(report, "nccl-error")
    assert report["findings"][0]["rule"] == "trial-error"
    assert "device-side assert triggered" in report["findings"][0]["message"]
    # The same NCCL error alone is still NCCL's.
    _, report = inspect_json("-", stdin=text.split("Traceback")[0].split("\n")[-1] + UNHANDLED)
    assert findings_of(report, "nccl-error")


def test_ncclchecks_error_return_trace_with_debug_on():
    # NCCL_DEBUG=INFO: each level a failed call returns through logs "file:line -> result"
    # (azhpc-images #327: a topology file for another machine).
    text = (
        "host:16674:17023 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /opt/graph.xml\n"
        "host:16674:17023 [0] graph/search.cc:703 NCCL WARN XML Import Channel : dev 1 not found.\n"
        "host:16674:17023 [0] NCCL INFO graph/search.cc:733 -> 2\n"
        "host:16674:17023 [0] NCCL INFO graph/search.cc:740 -> 2\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert findings_of(report, "nccl-error")


def test_near_miss_nccl_info_lines_of_a_healthy_init():
    text = (
        "host:16674:17023 [0] NCCL INFO Channel 00/02 :    0   1\n"
        "host:16674:17023 [0] NCCL INFO Connected all rings\n"
        "host:16674:17023 [0] NCCL INFO comm 0x5640 rank 0 nranks 2 - Init COMPLETE\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "nccl-error")


def test_duplicate_gpu_is_told_apart_from_other_invalid_usage():
    # torch shows NCCL's last error under ncclInvalidUsage; two ranks on one GPU is the cause
    # (fractional GPUs per Ray Train worker, ray #48012).
    text = (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, invalid "
        "usage, NCCL version 2.14.3\n"
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "Last error:\n"
        "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 3b000\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "nccl-error")
    assert "same GPU" in finding["message"]
    assert "inconsistently" not in finding["message"]
