"""oom-cuda: torch's CUDA out-of-memory texts (no GPU here: the edited fixture carries them)."""

from conftest import findings_of, inspect_json

WORDINGS = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free.",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.21 GiB already allocated; 3.19 MiB free; 14.70 GiB reserved in total by PyTorch)",
    "RuntimeError: CUDA error: out of memory",
    # the CUDA driver API's name for it, as TensorFlow logs it (ray #13680, as posted)
    "(pid=4241) 2021-01-25 03:36:41.436526: I tensorflow/stream_executor/cuda/cuda_driver.cc:775] "
    "failed to allocate 3.88G (4162022400 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of "
    "memory",
    # vLLM's cumem allocator waking up (lmm-r1 #43, as posted)
    "(ActorModelRayActor pid=348952) RuntimeError: CUDA Error: out of memory at "
    "/workspace/csrc/cumem_allocator.cpp:62",
]


def test_every_wording():
    for text in WORDINGS:
        code, report = inspect_json("-", stdin=text + "\n")
        assert code == 1
        (finding,) = findings_of(report, "oom-cuda")
        assert "ran out of GPU memory" in finding["message"]


def test_details_are_read():
    _, report = inspect_json("-", stdin=WORDINGS[0] + "\n")
    (finding,) = findings_of(report, "oom-cuda")
    assert "tried to allocate 2.00 GiB" in finding["message"] and "GPU 0" in finding["message"]
    assert "79.19 GiB total" in finding["message"]


def test_near_miss_host_memory_error():
    _, report = inspect_json("-", stdin="MemoryError: Unable to allocate 8.00 GiB for an array\n")
    assert not findings_of(report, "oom-cuda")
