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
    # torch_memory_saver's driver check, training and rollout sharing GPUs (slime #274)
    "Error Log:`[torch_memory_saver.cpp] CUresult error: 2 (out of memory) file=csrc/utils.h "
    "func=cu_mem_create line=187`",
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


def test_near_miss_another_driver_error_of_torch_memory_saver():
    text = (
        "[torch_memory_saver.cpp] CUresult error: 1 (invalid argument) file=csrc/utils.h "
        "func=cu_mem_create line=169\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "oom-cuda")


def test_near_miss_host_memory_error():
    _, report = inspect_json("-", stdin="MemoryError: Unable to allocate 8.00 GiB for an array\n")
    assert not findings_of(report, "oom-cuda")


def test_near_miss_a_ray_task_error_naming_only_the_class():
    # Ray names a task's exception by its class alone: torch's CUDA OutOfMemoryError (NeMo RL
    # #3793) and Ray's memory-monitor OutOfMemoryError passed up by a task that waited on the
    # killed one (verl-omni #402) read the same. Which memory it was is not in the text.
    text = (
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::PolicyWorker.get_logprobs() "
        "(pid=2671339, ip=10.65.16.209, repr=PolicyWorker[rank=0])\n"
        '  File "/app/worker.py", line 653, in get_logprobs\n'
        "    logits = self.model(input_ids).logits\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "oom-cuda")
    assert not findings_of(report, "oom-ray-memory-monitor")


def test_near_miss_a_task_that_waited_on_one_the_memory_monitor_killed():
    text = (
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::outer() (pid=1, ip=10.0.0.1)\n"
        '  File "/app/train.py", line 10, in outer\n'
        "    ray.get(inner.remote())\n"
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
        "memory.\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert report["findings"][0]["rule"] == "oom-ray-memory-monitor"


OTHER_ACCELERATORS = [
    # torch_npu on Ascend (TouchNet #100, as posted)
    "RuntimeError: NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB total "
    "capacity; 49.47 GiB already allocated; 49.47 GiB current active; 1.32 GiB free; 57.55 GiB "
    "reserved in total by PyTorch)",
    # Habana's bridge on Gaudi (milabench #301, as posted)
    "\t* 1 x RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for "
    "size::268435456 (256)MB",
    # the TPU runtime reserving a program's memory (pytorch/xla #3470, as posted)
    "2022-04-04 00:27:49.642380: E tensorflow/compiler/xla/xla_client/xla_util.cc:88]   (1) "
    "RESOURCE_EXHAUSTED: Attempting to reserve 6.48G at the bottom of memory. That was not "
    "possible. There are 6.78G free, 0B reserved, and 3.33G reservable.",
]


def test_other_accelerators_out_of_memory():
    for text in OTHER_ACCELERATORS:
        code, report = inspect_json("-", stdin=text + "\n")
        assert code == 1, text
        (finding,) = findings_of(report, "oom-cuda")
        assert "ran out of GPU memory" in finding["message"]


def test_near_miss_an_npu_error_that_is_not_memory():
    text = "RuntimeError: NPU error, error code is 107020.\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "oom-cuda")
