"""The out-of-memory family: Ray's memory monitor, the GPU, and the kernel's OOM killer.

They share one module because they must not overlap: a worker Ray's memory monitor killed also
dies by SIGKILL, so `oom-killed-by-os` stands back whenever Ray's own message is there.
"""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment, Failure
from ray_doctor.rules._base import Precedence, subject_name
from ray_doctor.rules._crash import CRASH, SELF_EXIT_NOT_KILL
from ray_doctor.rules._events import event_lines
from ray_doctor.rules._memory_hog import describe, may_attribute, os_victim
from ray_doctor.rules._signature import (
    Hit,
    SignatureRule,
    any_line,
    ended_by,
    first_group,
    first_match,
    hit_text,
    search,
    signatures,
    texts_of,
    wording,
)

RAYLET = "Ray raylet, memory monitor (src/ray/raylet/node_manager.cc)"
RAY_MONITOR = signatures(
    wording(
        "memory monitor kill",
        r"(\d+) worker\(s\) were killed due to the node running low on memory",
        RAYLET,
        "Ray 2.56-2.60",
        "1 worker(s) were killed due to the node running low on memory.",
    ),
    wording(
        "memory monitor kill",
        r"Task was killed due to the node running low on memory",
        RAYLET,
        "Ray 2.2-2.55",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    ),
    wording(
        "memory monitor threshold",
        r"which exceeds the memory usage threshold of [\d.]+",
        RAYLET,
        "Ray 2.1-2.60",
        "Memory on the node (IP: 10.0.0.1, ID: 4cb2) where the task (task ID: 43, name=f, "
        "pid=11362, memory used=1.25GB) was running was 27.71GB / 28.80GB (0.962273), which "
        "exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 6f2e)",
    ),
    wording(
        "memory monitor kill (its first words)",
        # The head of the same message, where a paste cut it short.
        r"Memory on the node \(IP: [^,)]+, ID: [0-9a-f]+\) where the (?:task|actor|lease)",
        RAYLET,
        "Ray 2.1-2.60",
        "Memory on the node (IP: 10.1.180.84, ID: ba65c80c) where the task (task ID: d221d2, "
        "name=head, rank=0,, pid=4503, memory used",
    ),
    wording(
        "memory monitor advice",
        r"address the out of memory issue: https://docs\.ray\.io\S*(?:ray-oom-prevention|debug-memory)",
        RAYLET,
        "Ray 2.2-2.60",
        "Refer to the documentation on how to address the out of memory issue: "
        "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.",
    ),
    wording(
        "memory monitor kill (first wording)",
        r"System memory low at node with IP \S+\. Used memory .* exceeds threshold [\d.]+, "
        r"killing",
        RAYLET,
        "Ray 2.0-2.1",
        "(raylet) node_manager.cc:2963: System memory low at node with IP 172.17.0.2. Used "
        "memory (23.63GB) / total capacity (33.28GB) (0.709971) exceeds threshold 0.7, killing "
        "latest task with name f()",
    ),
    wording(
        "raylet kill notice",
        r"Killing (\d+) worker\(s\), kill details: Memory on the node",
        RAYLET,
        "Ray 2.56-2.60",
        "(raylet) node_manager.cc:3199: Killing 1 worker(s), kill details: Memory on the node "
        "(IP: 10.0.0.1, ID: 48d3) was 3.66GB used / 23.54GB limit (0.155360)",
    ),
    wording(
        "worker exit: node out of memory",
        r"(?:exit_type = |Worker exit type: )NODE_OUT_OF_MEMORY",
        "Ray GCS, worker exit report (src/ray/gcs/gcs_server/gcs_worker_manager.cc)",
        "Ray 2.2-2.60",
        "Reporting worker exit, worker id = 47d7, node id = 48d3, address = 10.0.0.1, "
        "exit_type = NODE_OUT_OF_MEMORY, exit_detail = Task was killed due to the node running "
        "low on memory.",
    ),
    wording(
        "raylet summary",
        r"(\d+) Workers \(tasks / actors\) killed due to memory pressure \(OOM\)",
        RAYLET,
        "Ray 2.2-2.60",
        "(raylet) [2023-05-19 12:35:18] 1 Workers (tasks / actors) killed due to memory pressure "
        "(OOM), 0 Workers crashed due to other reasons at node (ID: 1c8a, IP: 10.0.0.1) over the "
        "last time period.",
    ),
    wording(
        "task retried after OOM",
        r"failed due to oom\. There are",
        "Ray core worker, task retry (src/ray/core_worker/task_manager.cc)",
        "Ray 2.3-2.60",
        "Task allocate failed due to oom. There are infinite oom retries remaining, so the task "
        "will be retried.",
    ),
    wording(
        "Ray OutOfMemoryError",
        r"ray\.exceptions\.OutOfMemoryError|\bOutOfMemoryError: (?:Task was killed|\d+ worker)",
        "Ray Python, ray/exceptions.py",
        "Ray 2.2-2.60",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    ),
    wording(
        "RayOutOfMemoryError (node)",
        r"More than \d+% of the memory on node \S+ is used",
        "Ray Python memory monitor (ray/memory_monitor.py, ray/_private/memory_monitor.py)",
        "Ray 0.7-1.13",
        "ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node "
        "ip-172-31-1-1 is used (14.93 / 15.5 GB). The top 10 memory consumers are:",
    ),
    wording(
        "RayOutOfMemoryError (heap limit)",
        # With the class: Ray 0.7-1.0 logs the same words as a warning at 80 % of the limit.
        r"RayOutOfMemoryError: Heap memory usage for \S+ is [\d.]+ / [\d.]+ GiB limit",
        "Ray Python memory monitor (ray/memory_monitor.py)",
        "Ray 0.7-1.x",
        "ray.memory_monitor.RayOutOfMemoryError: Heap memory usage for ray_PPO_123 is "
        "4.1 / 4.0 GiB limit",
    ),
    wording(
        "RayOutOfMemoryError",
        r"\bRayOutOfMemoryError\b",
        "Ray Python memory monitor (ray/memory_monitor.py)",
        "Ray 0.7-1.13",
        "ray.exceptions.RayOutOfMemoryError: More than 95% of the memory is used",
    ),
)
USED_NEW = re.compile(r"was ([\d.]+GB) used / ([\d.]+GB) limit")
USED_OLD = re.compile(r"was ([\d.]+GB) / ([\d.]+GB) \(")
TASK_NAME = re.compile(r"task name=([\w.<>]+)|name=([\w.<>]+), pid=")
NODE_IP = re.compile(r"Memory on the node \(IP: ([^,]+),")

ALLOCATOR = "torch CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp)"
CUDA = signatures(
    wording(
        "torch OutOfMemoryError",
        r"torch\.(?:cuda\.)?OutOfMemoryError",
        ALLOCATOR,
        "torch 1.13-2.13",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 3.94 MiB is free.",
    ),
    wording(
        "CUDA out of memory",
        r"CUDA out of memory",
        ALLOCATOR,
        "torch 0.4-2.13",
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 10.76 GiB total "
        "capacity; 9.72 GiB already allocated; 1.44 MiB free; 9.88 GiB reserved in total by "
        "PyTorch)",
    ),
    wording(
        "CUDA error: out of memory",
        r"CUDA error: out of memory|cuda runtime error \(2\) : out of memory",
        "CUDA runtime through torch's C10_CUDA_CHECK / THC (cudaErrorMemoryAllocation)",
        "torch 0.3-2.13",
        "RuntimeError: CUDA error: out of memory",
    ),
    wording(
        "CUDA driver / runtime allocation failed",
        r"CUDA driver error: out of memory|cudaErrorMemoryAllocation|"
        r"cudaMalloc(?:Async)? failed: out of memory",
        "CUDA driver and runtime through torch, CuPy, XLA (cuMemAlloc / cudaMalloc)",
        "torch 2.x; CuPy; XLA",
        "RuntimeError: CUDA driver error: out of memory",
    ),
    wording(
        "CUDA driver API out of memory",
        r"CUDA_ERROR_OUT_OF_MEMORY|CUDA Error: out of memory at ",
        "the CUDA driver API's error name and text (cuGetErrorName / cuGetErrorString) as "
        "TensorFlow's stream executor, XLA and vLLM's cumem allocator print them",
        "TensorFlow 1.x-2.x; JAX; vLLM 0.7+",
        "failed to allocate 3.88G (4162022400 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out "
        "of memory",
    ),
    wording(
        "torch_memory_saver: CUDA driver out of memory",
        # CUDA_ERROR_OUT_OF_MEMORY is 2, and cuGetErrorString says "out of memory".
        r"CUresult error: 2 \(out of memory\)",
        "torch_memory_saver's CURESULT_CHECK (csrc/utils.h), as SGLang, slime and verl "
        "colocating training and rollout print it",
        "torch_memory_saver 0.0.x",
        "[torch_memory_saver.cpp] CUresult error: 2 (out of memory) file=csrc/utils.h "
        "func=cu_mem_create line=187",
    ),
    wording(
        "cuBLAS allocation failed",
        r"CUBLAS_STATUS_ALLOC_FAILED",
        "cuBLAS through torch (aten/src/ATen/cuda/CublasHandlePool.cpp)",
        "torch 1.x-2.13",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    ),
    wording(
        "CUDA library allocation failed",
        r"CUDNN_STATUS_ALLOC_FAILED|CUFFT_ALLOC_FAILED|CUSOLVER_STATUS_ALLOC_FAILED|"
        r"CUSPARSE_STATUS_ALLOC_FAILED",
        "cuDNN, cuFFT, cuSOLVER and cuSPARSE status names through torch's error checks "
        "(aten/src/ATen/cudnn, native/cuda)",
        "torch 1.x-2.13",
        "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    ),
    wording(
        "TPU / XLA device memory exhausted",
        r"Attempting to allocate [\d.]+[KMGT]?i?B?\. That was not possible\. There are "
        r"[\d.]+[KMGT]?i?B? free|Ran out of memory in memory space hbm|"
        r"RESOURCE_EXHAUSTED: Error allocating device buffer|"
        # the TPU runtime reserving a program's memory (torch_xla 1.x on TPU VMs, xla #3470)
        r"RESOURCE_EXHAUSTED: Attempting to reserve [\d.]+[KMGT]?i?B? at the bottom of memory",
        "the TPU runtime's and XLA's allocators (tensorflow/compiler/xla, libtpu) through "
        "torch_xla, JAX and TensorFlow",
        "torch_xla 1.x-2.x; JAX; TensorFlow 2.x",
        "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating device buffer: "
        "Attempting to allocate 129.50M. That was not possible. There are 78.17M free.; "
        "(0x0x0_HBM0)",
    ),
    wording(
        "CUDA out of memory (cudaMallocAsync)",
        r"Allocation on device \d+ would exceed allowed memory\. \(out of memory\)",
        "torch's cudaMallocAsync allocator (c10/cuda/CUDAMallocAsyncAllocator.cpp, "
        "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync)",
        "torch 2.0-2.13",
        "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of "
        "memory)",
    ),
    wording(
        "NCCL could not allocate GPU memory",
        r"Cuda failure '?out of memory'?",
        "NCCL (src/include/checks.h CUDACHECK)",
        "NCCL 2.x",
        "misc/nvmlwrap.cc NCCL WARN Cuda failure 'out of memory'",
    ),
    wording(
        "HIP out of memory",
        r"HIP out of memory",
        "torch ROCm caching allocator (hipified CUDACachingAllocator.cpp)",
        "torch 1.8-2.13 (ROCm)",
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 64.00 MiB",
    ),
    # Other accelerators' ports of torch's caching allocator print its words with their name.
    wording(
        "NPU / XPU out of memory",
        r"(?:NPU|XPU) out of memory\. Tried to allocate",
        "torch_npu's (Ascend, NPUCachingAllocator.cpp) and torch's / IPEX's XPU caching allocators",
        "torch_npu 1.11-2.x; torch 2.5-2.13 (XPU), IPEX 1.x-2.x",
        "RuntimeError: NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB total "
        "capacity; 49.47 GiB already allocated; 1.32 GiB free)",
    ),
    wording(
        "Paddle out of GPU memory",
        r"Out of memory error on GPU \d+\. Cannot allocate",
        "PaddlePaddle's GPU allocators (paddle/fluid/memory/allocation: cuda_allocator.cc, "
        "the auto-growth and virtual-memory allocators), a ResourceExhausted error",
        "PaddlePaddle 1.8-3.x",
        "Out of memory error on GPU 0. Cannot allocate 18.062744MB memory on GPU 0, available "
        "memory is only 17.537501MB.",
    ),
    wording(
        "Gaudi device memory exhausted",
        r"MODULE:PT_DEVMEM Allocation failed for size",
        "Habana's PyTorch bridge on Gaudi HPUs (habana_frameworks, its device-memory module)",
        "SynapseAI 1.x",
        "RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for "
        "size::268435456 (256)MB",
    ),
    wording(
        "MPS out of memory",
        r"MPS backend out of memory",
        "torch MPS allocator (aten/src/ATen/mps/MPSAllocator.mm)",
        "torch 2.0-2.13",
        "RuntimeError: MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: "
        "1.01 GB, max allowed: 18.13 GB).",
    ),
    wording(
        "TensorFlow OOM",
        r"OOM when allocating tensor",
        "TensorFlow BFC allocator (tensorflow/core/common_runtime/bfc_allocator.cc)",
        "TensorFlow 1.x-2.x",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
        "tensor with shape[256,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0",
    ),
    wording(
        "TensorFlow GPU allocation failed",
        r"ResourceExhaustedError: .*device:GPU:\d+\S* failed to allocate memory",
        "TensorFlow eager op on a GPU (its allocator's 'failed to allocate memory')",
        "TensorFlow 2.x",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node "
        "__wrapped__Mul_device_/job:localhost/replica:0/task:0/device:GPU:0}} failed to allocate "
        "memory [Op:Mul]",
    ),
    wording(
        "XLA out of memory",
        r"RESOURCE_EXHAUSTED: Out of memory while trying to allocate",
        "XLA / JAX device allocator (xla/pjrt, tsl/framework/bfc_allocator.cc)",
        "JAX 0.2-0.4+",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying "
        "to allocate 1073741824 bytes.",
    ),
)
TRIED = re.compile(r"Tried to allocate ([\d.]+ [KMGT]i?B)")
GPU_INDEX = re.compile(r"GPU (\d+)")
TOTAL = re.compile(r"([\d.]+ [KMGT]i?B) total capacity|has a total capacity of ([\d.]+ [KMGT]i?B)")

KERNEL = "Linux kernel OOM killer (mm/oom_kill.c)"
ELASTIC = "torch.distributed.elastic (torchrun) agent and error report"
SLURM = "Slurm slurmstepd / srun (task/cgroup plugin)"
# Proof that memory ran out (a kernel, container or scheduler says so, or SIGKILL is named).
OS_KILL_CONFIRMED = signatures(
    wording(
        "kernel OOM killer",
        # The victim's line (mm/oom_kill.c) also stands alone when the "Out of memory" line
        # before it was cut, as schedulers that forward dmesg do.
        r"Out of memory: Kill(?:ed)? process (\d+)|total-vm:\d+kB, anon-rss:\d+kB, file-rss",
        KERNEL,
        "Linux 2.6-6.x ('Kill process ... or sacrifice child' before 5.0)",
        "Out of memory: Killed process 3341 (python) total-vm:48123456kB, anon-rss:31234567kB",
    ),
    wording(
        "kernel OOM killer (cgroup)",
        r"Memory cgroup out of memory: Kill(?:ed)? process (\d+)|oom-kill:constraint=|"
        r"invoked oom-killer: gfp_mask|oom_reaper: reaped process (\d+)",
        KERNEL,
        "Linux 4.6-6.x",
        "Memory cgroup out of memory: Killed process 3341 (python) total-vm:123kB",
    ),
    wording(
        "Kubernetes OOMKilled",
        r"\bOOMKilled\b",
        "Kubernetes kubelet / container runtime (container status reason)",
        "Kubernetes 1.x",
        "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137",
    ),
    wording(
        "Colab: all RAM used",
        r"Your session crashed after using all available RAM",
        "Google Colab's notebook front end, when the runtime's kernel was killed for memory",
        "Colab 2019-2026",
        "Your session crashed after using all available RAM.",
    ),
    wording(
        "YARN: container over its memory limit",
        r"Container killed by YARN for exceeding memory limits",
        "Spark on YARN reporting the NodeManager's container monitor (YarnAllocator: "
        "ContainersMonitorImpl killed the container), through TensorFlowOnSpark, Ray on Spark",
        "Spark 1.x-3.x",
        "ERROR YarnClusterScheduler: Lost executor 9 on host: Container killed by YARN for "
        "exceeding memory limits. 7.2 GB of 4.2 GB virtual memory used.",
    ),
    wording(
        "runc: container init OOM-killed",
        r"container init was OOM-killed \(memory limit too low\?\)",
        "runc starting a container whose init the kernel OOM killer ended "
        "(libcontainer/process_linux.go), through Kubernetes, Docker, Podman",
        "runc 1.1+",
        "Error: container create failed: ... runc create failed: unable to start container "
        "process: container init was OOM-killed (memory limit too low?)",
    ),
    wording(
        "Kubernetes eviction: memory",
        r"The node was low on resource: memory",
        "Kubernetes kubelet eviction manager (pkg/kubelet/eviction)",
        "Kubernetes 1.x",
        "Status: Failed  Reason: Evicted  Message: The node was low on resource: memory. "
        "Container ray-worker was using 30Gi, which exceeds its request of 8Gi.",
    ),
    wording(
        "Slurm oom-kill event",
        r"Detected (\d+) oom[-_]kill event|[Ee]xceeded (?:job|step) memory limit|"
        r"task \d+: Out Of Memory|\bOUT_OF_MEMORY\b",
        SLURM,
        "Slurm 17.x-24.x",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=59137890.batch. Some of your "
        "processes may have been killed by the cgroup out-of-memory handler.",
    ),
    wording(
        "torchelastic: SIGKILL",
        r"exitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\) received by PID (\d+)|"
        r"failed \(exitcode: -9\)",
        ELASTIC,
        "torch 1.9-2.13",
        "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
        "local_rank: 0 (pid: 62498) of binary: /usr/bin/python",
    ),
    wording(
        "launcher: SIGKILL",
        r"(?:exit|return) ?code\s*[:=]?\s*-9\b|died with <Signals\.SIGKILL: 9>|"
        r": terminated by signal 9$",
        "DeepSpeed launcher (deepspeed/launcher/launch.py), CPython subprocess, GNU xargs",
        "DeepSpeed 0.3-0.16; Python 3.x; findutils 4.x",
        "[launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py'] exits with "
        "return code = -9",
    ),
    wording(
        "torch.multiprocessing: SIGKILL",
        r"process \d+ terminated with signal SIGKILL",
        "torch.multiprocessing.spawn's ProcessExitedException (torch/multiprocessing/spawn.py)",
        "torch 1.x-2.13",
        "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal "
        "SIGKILL",
    ),
    wording(
        "exit code 137",
        r"(?i:exit[ _]?code)\W{0,3}\s*137\b|exit(?:ed)? (?:with )?(?:code|status) 137\b|"
        r"exit status 137\b",
        "container runtimes (Docker, containerd, Kubernetes), shells: 128 + SIGKILL",
        "any",
        "command terminated with exit code 137",
    ),
    wording(
        "DataLoader worker killed",
        r"DataLoader worker \(pid \d+\) is killed by signal: Killed",
        "torch DataLoader (torch/csrc/DataLoader.cpp)",
        "torch 0.4-2.13",
        "RuntimeError: DataLoader worker (pid 8544) is killed by signal: Killed.",
    ),
    # Job reports are not anchored to a line's start: a progress bar padded to the terminal's
    # width ends up in front of them when a pasted text is unwrapped.
    wording(
        "shell: Killed",
        r"^\s*(?:Killed|已杀死)\s*$|^.*line \d+:\s+\d+ Killed\s|\[\d+\][+-]?\s+Killed\s+\S|"
        # tqdm redraws its bar with a carriage return and no newline, so the shell's report
        # lands at the end of the bar: "4/8 [02:10<02:22, 35.73s/it]Killed"; mmcv's bar ends
        # in its ETA ("1022/5000, 1.5 task/s, elapsed: 673s, ETA: 2621s已杀死").
        r"(?:(?:s/it|it/s)\]|ETA:\s*\d+s)\s*(?:Killed|已杀死)\s*$",
        "bash / sh job report of a child ended by SIGKILL (strsignal's text; glibc's zh_CN "
        "translation '已杀死' on Chinese locales)",
        "any",
        "Killed",
    ),
    wording(
        "shell: killed (zsh)",
        r"\bzsh: killed\s+\S|\[\d+\]\s+(?:[+-]\s+)?\d+ killed\s+\S",
        "zsh job report of a job ended by SIGKILL (its signal message 'killed')",
        "any",
        "[1]    55263 killed     python train.py",
    ),
)
# Who, among the confirmations, says outright that memory ran out.
MEMORY_WITNESS = {
    "kernel OOM killer": "the kernel log says so",
    "kernel OOM killer (cgroup)": "the kernel log says so: the cgroup's memory limit",
    "Kubernetes OOMKilled": "Kubernetes says OOMKilled: the container's memory limit",
    "Kubernetes eviction: memory": "Kubernetes evicted the pod: the node was low on memory",
    "Slurm oom-kill event": "Slurm says so: the job's memory limit (cgroup)",
    "YARN: container over its memory limit": "YARN says so: the container's memory limit",
    "Colab: all RAM used": "Colab says so: the runtime used all of its RAM",
}
# Ray saying a worker died without a Python exception: SIGKILL or a crash, it cannot tell.
OS_KILL_RAY = signatures(
    wording(
        "worker died without an exception",
        r"Worker unexpectedly exits with a connection error code 2",
        "Ray raylet / GCS worker exit detail (src/ray/raylet/node_manager.cc)",
        "Ray 1.13-2.60",
        "Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
        "connection error code 2. End of file. There are some potential root causes.",
    ),
    wording(
        "worker died without an exception",
        r"Worker exits unexpectedly\. Worker exits with an exit code None",
        "Ray core worker exit detail (src/ray/core_worker/core_worker.cc)",
        "Ray 2.0-2.60",
        "Worker exits unexpectedly. Worker exits with an exit code None. The worker may have "
        "exceeded K8s pod memory limits.",
    ),
    wording(
        "worker crashed",
        r"The worker died unexpectedly while executing this task",
        "Ray Python WorkerCrashedError (ray/exceptions.py)",
        "Ray 0.8-2.60",
        "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this "
        "task. Check python-core-worker-*.log files for more information.",
    ),
    wording(
        "worker died: unexpected system error",
        r"A worker died or was killed while executing (?:a|the) task by an unexpected system error",
        "Ray raylet, pushed to the driver (src/ray/raylet/node_manager.cc)",
        "Ray 1.0-2.60",
        "(raylet) A worker died or was killed while executing a task by an unexpected system "
        "error. To troubleshoot the problem, check the logs for the dead worker.",
    ),
)
OS_KILL = OS_KILL_CONFIRMED + OS_KILL_RAY


def _failures_say_it_exited(experiment: Experiment) -> bool:
    """For a log line that names no worker: the run's failures say the dead worker exited
    with a status (a failure's own text is among `texts_of` already)."""
    return any(SELF_EXIT_NOT_KILL.search(f.joined) for _, f, _ in ended_by(experiment))


def _ray_monitor_in(experiment: Experiment, failure: Failure | None) -> bool:
    if failure is not None and search(RAY_MONITOR, failure):
        return True
    lines, joined = event_lines(experiment.events)
    return any(any_line(sig.pattern, lines, joined) for sig in RAY_MONITOR)


class OomRayMemoryMonitor(SignatureRule):
    """Ray's memory monitor killed a worker because the node ran low on memory.

    Symptom:
        A trial or Train worker died with `OutOfMemoryError` from Ray, or the driver stopped
        with "Caught unexpected exception: N worker(s) were killed due to the node running low
        on memory"; in Ray 2.60 such a trial can stay RUNNING on storage with no error.txt.
    Likely cause:
        The processes on one node used more host memory than Ray's kill threshold
        (`RAY_memory_usage_threshold`, 0.95 by default): too many trials or workers per node,
        a whole dataset loaded into memory, large objects passed through the config, or memory
        that grows every iteration (tensors or lists kept alive).
    Evidence it uses:
        The memory monitor's message in error.txt, in the driver's output, in raylet.out
        ("Killing N worker(s)") and gcs_server.out (`exit_type = NODE_OUT_OF_MEMORY`), both
        wordings: "Task was killed due to the node running low on memory" (before 2.56) and
        "N worker(s) were killed due to the node running low on memory".
    Fix:
        Give each trial the memory it needs so Ray places fewer per node:
        `tune.with_resources(trainable, {"cpu": 2, "memory": 8 * 1024**3})` or
        `TuneConfig(max_concurrent_trials=...)`; for Train, fewer workers per node. Stream data
        (Ray Data, generators) instead of loading it whole, create datasets and models inside
        the training function, and free large objects (`del`, `gc.collect()`). The threshold
        can be raised with `RAY_memory_usage_threshold`, at the risk of the kernel's killer.
    References:
        - https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html
        - https://docs.ray.io/en/latest/ray-observability/user-guides/debug-apps/debug-memory.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "oom-ray-memory-monitor"
    title = "Killed by Ray's memory monitor"
    severity = Severity.ERROR
    example = "fixtures/tune_oom_memory_monitor"
    signatures = RAY_MONITOR
    victim_pid = re.compile(r"pid=(\d+), actual memory used|name=[^,]*, pid=(\d+), memory used")

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        match = first_match(hit, USED_NEW, USED_OLD)
        task = first_group(hit, TASK_NAME)
        node = first_group(hit, NODE_IP)
        who = subject_name(experiment, hit.trial)
        if hit.trial is None and hit.failure is not None:
            who = "The driver"
            detail = " stopped because Ray's memory monitor killed a worker"
        else:
            detail = " was stopped by Ray's memory monitor"
        message = f"{who}{detail}: the node ran low on host memory"
        if match:
            message += f" ({match.group(1)} used of {match.group(2)}"
            message += f" on node {node})" if node else ")"
        kept = (event.line for event in experiment.events if may_attribute(event.line))
        notice = "\n".join([hit_text(hit), *kept])
        attribution = describe(experiment, notice)
        if attribution:
            message += f"; {attribution}"
        elif task:
            message += f"; the process killed was running {task}"
        message += f". Evidence: {hit.signature.label}."
        unfinished = [t for t in experiment.trials if t.status.unfinished]
        if unfinished and hit.trial is None:
            message += (
                f" {len(unfinished)} trial(s) were left unfinished on storage because the driver "
                "stopped."
            )
        fix = (
            "Request memory per trial so Ray places fewer on a node "
            '(`tune.with_resources(trainable, {"cpu": 2, "memory": 8 * 1024**3})` or '
            "`TuneConfig(max_concurrent_trials=...)`; for Train, fewer workers per node), stream "
            "data instead of loading it whole, and free large objects between iterations. Then "
            "resume the run; `RAY_memory_usage_threshold` moves the kill threshold."
        )
        return message, fix


class OomCuda(SignatureRule):
    """The GPU ran out of memory (CUDA out of memory).

    Symptom:
        A trial or Train worker failed with `torch.OutOfMemoryError` /
        `torch.cuda.OutOfMemoryError`, "CUDA out of memory. Tried to allocate ..." or
        "CUDA error: out of memory".
    Likely cause:
        The batch, the model, or the activations kept for backward do not fit in the GPU's
        memory; or several trials share one GPU (fractional `gpu` resources); or memory is
        fragmented (much reserved but unallocated).
    Evidence it uses:
        The exception in error.txt, the driver's log or the Train worker logs; the requested
        allocation and GPU index when torch prints them.
    Fix:
        In order of cost: a smaller batch size; gradient accumulation to keep the effective
        batch; mixed precision (`torch.autocast` with bf16/fp16); activation checkpointing;
        sharding the model (FSDP, DeepSpeed ZeRO). Give each trial a whole GPU
        (`{"gpu": 1}`). When reserved memory far exceeds allocated memory, set
        `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    References:
        - https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf
        - https://docs.ray.io/en/latest/train/user-guides/fault-tolerance.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "oom-cuda"
    title = "GPU out of memory"
    severity = Severity.ERROR
    example = "fixtures/tune_oom_cuda"
    signatures = CUDA

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        tried = first_group(hit, TRIED)
        gpu = first_group(hit, GPU_INDEX)
        total = first_group(hit, TOTAL)
        message = f"{subject_name(experiment, hit.trial)} ran out of GPU memory"
        if hit.failure and hit.failure.ranks:
            message += f" on rank {', '.join(map(str, hit.failure.ranks))}"
        details = [
            f"tried to allocate {tried}" if tried else "",
            f"GPU {gpu}" if gpu else "",
            f"{total} total" if total else "",
        ]
        if any(details):
            message += f" ({', '.join(d for d in details if d)})"
        batch = _batch_setting(hit)
        if batch:
            message += f"; the trial's config has {batch}"
        beyond = _beyond_the_device(tried, total)
        if beyond:
            message += f"; {beyond}"
        message += "."
        fix = (
            "Lower the batch size (keep the effective batch with gradient accumulation), use "
            "mixed precision (`torch.autocast(dtype=torch.bfloat16)`), activation checkpointing, "
            "or shard the model (FSDP / ZeRO). Give each trial a whole GPU. If much memory is "
            "reserved but not allocated, set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`."
        )
        if beyond:
            fix = (
                "Check the sizes behind that one allocation first (batch, sequence length, "
                "vocabulary, a dimension multiplied twice): no memory saving makes it fit. Then "
                + fix[0].lower()
                + fix[1:]
            )
        return message, fix


_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _size(text: str | None) -> float | None:
    """Bytes of torch's "512.00 GiB" (its allocator prints binary units, format_size)."""
    number, _, unit = (text or "").partition(" ")
    try:
        return float(number) * _UNITS[unit]
    except (KeyError, ValueError):
        return None


def _beyond_the_device(tried: str | None, total: str | None) -> str:
    """Said when the failed request alone exceeds the GPU: then no saving trick helps."""
    asked, whole = _size(tried), _size(total)
    if asked is None or whole is None or asked <= whole:
        return ""
    return f"that one request is {asked / whole:.1f}x the whole GPU"


def _batch_setting(hit: Hit) -> str | None:
    if hit.trial is None:
        return None
    for key, value in hit.trial.config.items():
        if "batch" in key.lower() and isinstance(value, (int, float)):
            return f"{key}={value}"
    return None


class OomKilledByOs(SignatureRule):
    """A worker died without a Python exception (SIGKILL, exit 137): most likely the kernel's OOM killer.

    Symptom:
        A trial or worker ended with Ray's "The actor died unexpectedly" / "Worker unexpectedly
        exits with a connection error code 2. End of file", "The worker died unexpectedly",
        exit code 137 (128 + SIGKILL), or the kernel log says "Out of memory: Killed process".
    Likely cause:
        When memory runs out faster than Ray's memory monitor samples it (or the monitor is
        off, or a container limit is lower than the node's memory), the kernel or the
        container runtime kills the biggest process with SIGKILL and no Python error is
        written. The same symptom has other causes: `ray stop --force`, a crash in native code
        (SIGSEGV), a node or pod being shut down or preempted. Only a kernel log line proves
        the OOM killer.
    Evidence it uses:
        Ray's worker-death text in error.txt or logs, exit code 137 or -9, and kernel OOM
        lines in any text given (a saved `dmesg`, `journalctl -k`). It stays silent when Ray's
        own memory-monitor message is present (that is `oom-ray-memory-monitor`).
    Fix:
        Check `dmesg -T | grep -i -E "killed process|oom"` on the node that ran the worker
        (or the pod's `OOMKilled` status). If it was the OOM killer: request memory per trial,
        fewer trials or workers per node, stream data, and keep Ray's memory monitor on so
        that it, not the kernel, picks what to kill. If not: look for a SIGSEGV in the
        worker's .err log and for node shutdowns.
    References:
        - https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html
        - https://docs.ray.io/en/latest/train/user-guides/fault-tolerance.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "oom-killed-by-os"
    title = "Worker killed without an exception (likely the OS OOM killer)"
    severity = Severity.ERROR
    example = "fixtures/tune_sigkill"
    signatures = OS_KILL

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        if _ray_monitor_in(experiment, failure):
            return True
        # Ray's "worker died" texts say SIGKILL or a crash; when the text shows a crash and
        # nothing shows memory running out, it was the crash.
        texts = texts_of(experiment, failure)
        joined = "\n".join(texts)
        confirmed = [sig for sig in OS_KILL_CONFIRMED if any_line(sig.pattern, texts, joined)]
        if not confirmed:
            return (
                any_line(CRASH, texts, joined)
                or any_line(SELF_EXIT_NOT_KILL, texts, joined)
                or (failure is None and _failures_say_it_exited(experiment))
            )
        # A SIGKILL after the user interrupted the run (an IDE's stop button: "Process finished
        # with exit code 137" after a KeyboardInterrupt) is the user's, unless a kernel,
        # container or scheduler says memory ran out.
        witnessed = any(sig.label in MEMORY_WITNESS for sig in confirmed)
        return not witnessed and "KeyboardInterrupt" in joined

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        who = subject_name(experiment, hit.trial)
        texts = [hit_text(hit), *(e.line for e in experiment.events)]
        joined = "\n".join(texts)
        confirmed = next(
            (sig for sig in OS_KILL_CONFIRMED if any_line(sig.pattern, texts, joined)), None
        )
        victim = os_victim(experiment, joined)
        said_by = MEMORY_WITNESS.get(confirmed.label) if confirmed is not None else None
        if said_by is not None:
            message = f"{who}'s process was killed because memory ran out ({said_by})."
        elif confirmed is not None:
            message = (
                f"{who}'s process was killed by SIGKILL ({confirmed.label}) without a Python "
                "exception. The most likely sender is the kernel's OOM killer; `kill -9`, "
                "`ray stop --force` or a node shutdown look the same. No kernel log was given to "
                "confirm it."
            )
        else:
            message = (
                f"{who}'s worker process died without a Python exception ({hit.signature.label}). "
                "The most likely cause is the kernel's OOM killer (SIGKILL); `ray stop --force`, a "
                "crash in native code (SIGSEGV) or a node shutdown look the same. No kernel log "
                "was given to confirm it."
            )
        if victim:
            message += f" {victim[0].upper()}{victim[1:]}."
        fix = (
            "Confirm on the node: `dmesg -T | grep -i -E 'killed process|out of memory'` (or the "
            "pod's OOMKilled status). If it was memory: request memory per trial "
            '(`tune.with_resources(trainable, {"memory": ...})`), run fewer trials or workers per '
            "node and stream data. Otherwise look for a segfault in the worker's .err log."
        )
        return message, fix
