"""resources-insufficient: trials or a worker group cannot start for lack of resources."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ray_doctor._literals import may_match
from ray_doctor.findings import Finding, Severity
from ray_doctor.model import TUNE_STATUS, Experiment, Failure, Layout, LogEvent, TrialStatus
from ray_doctor.rules._base import Precedence, stop_subject, subject_name
from ray_doctor.rules._signature import (
    Hit,
    SignatureRule,
    any_line,
    first_match,
    signatures,
    texts_of,
    wording,
)

TUNE_RESOURCES = (
    "Ray Tune insufficient-resources manager (tune/execution/insufficient_resources_manager.py)"
)
CLOUD_CAPACITY = "autoscaler: the cloud is out of capacity"
TRIAL_CHILD = "a trial's task or actor has no resources in its placement group"
SLURM_NO_NODE = "Slurm: no node has what the job asks of one"
WAITING = signatures(
    wording(
        "Tune: insufficient resources",
        r"Insufficient cluster resources to launch trial",
        TUNE_RESOURCES,
        "Ray 1.x-2.60",
        "Insufficient cluster resources to launch trial: trial requested 4.0 CPUs, 0 GPUs, but "
        "the cluster has only 2 CPUs, 0 GPUs",
    ),
    wording(
        "Tune: cluster smaller than the request",
        r"You asked for [\d.]+ (?:cpu|CPUs) and [\d.]+ (?:gpu|GPUs) per trial",
        TUNE_RESOURCES,
        "Ray 1.9-2.60 (older releases say '4.0 cpu', newer '4.0 CPUs')",
        "Ignore this message if the cluster is autoscaling. You asked for 4.0 cpu and 0 gpu per "
        "trial, but the cluster only has 2.0 cpu and 0 gpu.",
    ),
    wording(
        "Tune: trial started without free resources",
        r"does not have enough free resources",
        "Ray Tune RayTrialExecutor (tune/ray_trial_executor.py)",
        "Ray 0.6-1.x",
        "WARNING:ray.tune.ray_trial_executor:Allowing trial to start even though the cluster "
        "does not have enough free resources. Trial actors may appear to hang until enough "
        "resources are added to the cluster (e.g., via autoscaling).",
    ),
    wording(
        "Kubernetes: pod cannot be scheduled",
        r"\d+/\d+ nodes are available: .*Insufficient (?:cpu|memory|nvidia\.com/gpu|"
        r"ephemeral-storage)",
        "Kubernetes kube-scheduler (FailedScheduling event)",
        "Kubernetes 1.x",
        "Warning  FailedScheduling  2m20s  default-scheduler  0/3 nodes are available: 3 "
        "Insufficient cpu, 3 Insufficient memory.",
    ),
    wording(
        "Tune: nothing started",
        # Ray 1.13: "within at least the last 60.0 seconds".
        r"No trial is running and no new trial has been started within (?:at least )?the last "
        r"(\d+)(?:\.\d+)? seconds",
        TUNE_RESOURCES,
        "Ray 1.x-2.60",
        "No trial is running and no new trial has been started within the last 60 seconds. This "
        "could be due to the cluster not having enough resources available to start the next "
        "trial.",
    ),
    wording(
        "Train: not started",
        r"Training has not started in the last (\d+) seconds",
        "Ray Train V1 backend executor",
        "Ray 2.0-2.40",
        "Training has not started in the last 60 seconds. Please check the provided resource "
        "config.",
    ),
    wording(
        "Train: worker group start timeout",
        r"The worker group startup timed out after",
        "Ray Train V2 worker group (ray/train/v2)",
        "Ray 2.41-2.60",
        "The worker group startup timed out after 30.0 seconds waiting for 4 workers.",
    ),
    wording(
        "Train: insufficient resources",
        r"InsufficientClusterResourcesError|Insufficient cluster resources",
        "Ray Train V2 scaling policy",
        "Ray 2.41-2.60",
        "ray.train.v2._internal.exceptions.InsufficientClusterResourcesError: Insufficient "
        "cluster resources. Worker requires {'CPU': 1.0}",
    ),
    wording(
        "autoscaler",
        # v1 (one request) and v2 ("requests {...}*2", "placement group requests", "cluster
        # constraint"); not a request for one node by name, nor a placement group's own
        # bundle resources (ray/64452: those wait on the group, not on a node type).
        r"No available node types can fulfill (?:resource requests? |placement group requests "
        r"|cluster constraint: )(?!\{'node:)(?![^\n]*_group_)",
        "Ray autoscaler (python/ray/autoscaler/_private/resource_demand_scheduler.py)",
        "Ray 1.x-2.60",
        "Error: No available node types can fulfill resource request {'CPU': 1.0, 'GPU': 1.0}. "
        "Add suitable node types to this cluster to resolve this issue.",
    ),
    wording(
        "autoscaler: no node type",
        # The warning of the autoscaler's bin-packing when no node type fits a request. Not a
        # request pinned to a node, nor placement-group bundle resources (they resolve with the
        # group; ray #20968 was a GCS bug), nor requests of nothing (`{"CPU": 0}`: a stale
        # demand, ray #27910), which no node type could lack.
        r"The autoscaler could not find a node type to satisfy the request: (?!\[?\{'node:)"
        r"(?![^\n]*_group_)(?!\[(?:\{['\"]\w+['\"]: 0(?:\.0)?\}(?:, )?)+\])",
        "Ray autoscaler (python/ray/autoscaler/_private/resource_demand_scheduler.py, "
        "get_nodes_for)",
        "Ray 1.0-2.60",
        "WARNING resource_demand_scheduler.py:643 -- The autoscaler could not find a node type "
        "to satisfy the request: [{'GPU': 1.0, 'CPU': 1.0}]. Please specify a node type with "
        "the necessary resources.",
    ),
    # Libraries that wait for a placement group and give up (TorchX's Ray scheduler, Ray's
    # own RayExecutor helpers): their message says what it means.
    wording(
        "placement group timed out",
        r"Placement group creation timed out\. Make sure (?:your )?cluster either has enough "
        r"resources",
        "TorchX's Ray scheduler (torchx/schedulers/ray/ray_driver.py) and others that copied it",
        "TorchX 0.1-0.7",
        "TimeoutError: Placement group creation timed out. Make sure your cluster either has "
        "enough resources or use an autoscaling cluster. Current resources available: "
        "{'CPU': 8.0, 'GPU': 1.0}",
    ),
    wording(
        "placement group timed out",
        r"Placement group creation timed out after \d+ seconds\. Make sure (?:your )?cluster "
        r"either has enough resources",
        "xgboost_ray / lightgbm_ray waiting for their actors' placement group "
        "(xgboost_ray/main.py, lightgbm_ray/main.py: _create_placement_group)",
        "xgboost_ray 0.1-0.1.19, lightgbm_ray 0.1",
        "TimeoutError: Placement group creation timed out after 100 seconds. Make sure your "
        "cluster either has enough resources or use an autoscaling cluster. Current resources "
        "available: {'CPU': 16.0}, resources requested by the placement group: [{'CPU': 1, "
        "'GPU': 1}]",
    ),
    # The node type exists but the cloud has none to give: the autoscaler logs the provider's
    # error code for each launch it tries (AWS EC2, GCE), and the request waits.
    wording(
        "raylet: unschedulable",
        r"(?:Actor|Task)UnschedulableError: The (?:actor|task) is not schedulable|"
        r"Cancelling infeasible tasks with resource shapes|"
        r"cannot fit into any bundles for the placement group",
        "Ray's raylet giving up on infeasible work (src/ray/raylet/scheduling/"
        "cluster_task_manager.cc, RAY_enable_infeasible_task_early_exit; ray/exceptions.py) "
        "and a task asking its placement group for more than a bundle holds "
        "(ray/util/placement_group.py)",
        "Ray 1.13-2.60",
        "ray.exceptions.ActorUnschedulableError: The actor is not schedulable: Tasks or actors "
        "with resource shapes [{GPU: 1, CPU: 1}] failed to schedule because there are not "
        "enough resources for the tasks or actors on the whole cluster.",
    ),
    wording(
        "Ray job: entrypoint resources",
        r"Job supervisor actor failed to start within [\d.]+ seconds\..{0,200}job entrypoint's "
        r"specified resources",
        "Ray's job manager, only when the job asked for entrypoint resources "
        "(python/ray/dashboard/modules/job/job_manager.py)",
        "Ray 2.9-2.60",
        "Job supervisor actor failed to start within 900.0 seconds. This timeout can be "
        "configured by setting the environment variable RAY_JOB_START_TIMEOUT_SECONDS. This may "
        "be because the job entrypoint's specified resources (entrypoint_num_cpus, "
        "entrypoint_num_gpus, entrypoint_resources, entrypoint_memory)aren't available on the "
        "cluster.",
    ),
    wording(
        TRIAL_CHILD,
        r"No trial resources are available for launching the (task|actor) `([^`]+)`",
        "Ray Tune / Train's session refusing a task or actor a trial starts outside its "
        "placement group (ray/tune/trainable/session.py, ray/train/_internal/session.py)",
        "Ray 2.0-2.60",
        "RuntimeError: No trial resources are available for launching the task "
        "`train.load_shard`. To resolve this, specify the Tune option:",
    ),
    # NeMo RL's RayVirtualCluster checks the cluster's GPUs before it places its groups
    # (nemo_rl/distributed/virtual_cluster.py): what it asked and what Ray has.
    wording(
        "NeMo RL: fewer GPUs than asked",
        r"Not enough GPUs available\. Requested (\d+) GPUs, but only (\d+) are available",
        "NeMo RL's virtual cluster (nemo_rl/distributed/virtual_cluster.py)",
        "NeMo RL 0.x",
        "ValueError: Not enough GPUs available. Requested 16 GPUs, but only 8 are available in "
        "the cluster.",
    ),
    wording(
        CLOUD_CAPACITY,
        r"\bInsufficientInstanceCapacity\b|\bZONE_RESOURCE_POOL_EXHAUSTED\b",
        "Ray autoscaler launching nodes (python/ray/autoscaler: the AWS and GCP node "
        "providers; the cloud's own error code)",
        "Ray 1.x-2.60",
        "[autoscaler] Launching instances failed: ... api error InsufficientInstanceCapacity: We "
        "currently do not have sufficient g3.8xlarge capacity in the Availability Zone you "
        "requested (us-west-2c).",
    ),
    wording(
        CLOUD_CAPACITY,
        r"ResourcesUnavailableError: Failed to provision all possible launchable resources",
        "SkyPilot's provisioner after every zone and cloud it may use refused the request "
        "(sky/exceptions.py, sky/backends/cloud_vm_ray_backend.py)",
        "SkyPilot 0.x",
        "sky.exceptions.ResourcesUnavailableError: Failed to provision all possible launchable "
        "resources. Relax the task's resource requirements: 1x RunPod(cpus=32+, {'H100': 8})",
    ),
    # Slurm refuses at submission a job whose per-node request (GPUs, cores, memory) no node of
    # the partition has: unlike a busy cluster, waiting would never start it.
    wording(
        SLURM_NO_NODE,
        r"Requested node configuration is not available",
        "Slurm's ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE (src/common/slurm_errno.c), printed "
        "by sbatch, salloc and srun",
        "Slurm 2.x-25.x",
        "sbatch: error: Batch job submission failed: Requested node configuration is not available",
    ),
    wording(
        "cannot be scheduled",
        r"resource request cannot be scheduled right now: (\{[^}]*\})",
        "Ray core, warning pushed to the driver (src/ray/raylet/scheduling)",
        "Ray 1.x-2.60",
        "Warning: The following resource request cannot be scheduled right now: {'CPU': 1.0}. "
        "This is likely due to all cluster resources being claimed by actors.",
    ),
    wording(
        "pending, cannot be scheduled",
        r"is pending and cannot currently be scheduled",
        "Ray core worker warning (python/ray/worker.py)",
        "Ray 0.8-1.0",
        "WARNING worker.py:1134 -- The actor or task with ID ffff is pending and cannot "
        "currently be scheduled. It requires {GPU: 0.100000}, {CPU: 1.000000} for execution",
    ),
    wording(
        "vLLM: tensor parallel larger than the cluster",
        r"Tensor parallel size \(\d+\) exceeds available GPUs \(\d+\)",
        "vLLM on Ray (vllm/executor/ray_utils.py)",
        "vLLM 0.4-0.11",
        "WARNING [ray_utils.py:352] Tensor parallel size (16) exceeds available GPUs (8). This "
        "may result in Ray placement group allocation failures.",
    ),
    wording(
        "cannot be scheduled",
        r"cannot be scheduled right now|is infeasible|"
        r"The following resource request cannot be sch",
        "Ray core (raylet scheduling)",
        "Ray 1.x-2.60",
        "The actor or task with ID ffff cannot be scheduled right now. It requires {CPU: 1} for "
        "placement, however the cluster currently cannot provide the requested resources.",
    ),
)
ASKED = re.compile(
    r"(?:trial|request|requests|requested|requires|asked for)[^{\[]{0,60}(\{[^}]*\})|"
    r"resources: (\[?\{[^}]*\}\]?(?: \* \d+)?)|You asked for ([\d.]+ \w+)"
)
# Tune says "per trial"; Train V1's copy of the message (its trainer's resources plus its
# workers') does not.
TUNE_ASKED = re.compile(
    r"You asked for (.+?)( per trial)?, but the cluster only has (.+?) available"
)
HAS = re.compile(
    r"(?:cluster (?:currently )?has|total resources|cluster resources)[^{]{0,30}(\{[^}]*\})", re.I
)


# Ray 1.x core worker: "It requires {CPU: 1.000000} for placement, but this node only has
# remaining {node:10.0.0.1: 1.000000}, {CPU: 2.000000}, {memory: ...}."
PLACEMENT = re.compile(
    r"It requires (?P<required>\{[^}]*\}(?:, \{[^}]*\})*) for placement, but this node only "
    r"has remaining (?P<remaining>\{[^}]*\}(?:, \{[^}]*\})*)"
)
AMOUNT = re.compile(r"\{?([\w:.-]+): ([\d.]+)")
# Tune's and Train's insufficient-resources manager (Ray 1.9-2.60): "You asked for 2.0 CPUs
# and 0 GPUs per trial, but the cluster only has 10.0 CPUs and 0 GPUs available" (Ray 1.x:
# "4.0 cpu and 0 gpu"; later "ACCs"). The cluster's side is `ray.cluster_resources()`, its
# total. Since Ray 2.x the warning comes whenever no PENDING trial fits that total, which
# includes there being no PENDING trial at all (every trial PAUSED, a searcher that gives no
# new one): with the numbers showing the request fits, they show it was not the resources.
ASKED_AND_TOTAL = re.compile(
    r"You asked for ([\d.]+) (?:cpus?|CPUs?) and ([\d.]+) (?:gpus?|GPUs?|ACCs?)(?: per trial)?, "
    r"but the cluster only has ([\d.]+) (?:cpus?|CPUs?) and ([\d.]+) (?:gpus?|GPUs?|ACCs?)"
)
# The wordings of that same message: they say no more than its numbers.
MANAGER_WORDINGS = frozenset(
    {"Tune: cluster smaller than the request", "Tune: nothing started", "Train: not started"}
)


# Tune's last status block in a log (the scan keeps it as TUNE_STATUS events): every trial
# PENDING, none of the cluster's CPUs or GPUs held by a running trial, and the run going on for
# a while. A trial whose request fits starts within a second or two of its placement group; one
# that fits nowhere waits like this forever, and a paste of such a status is how most "my trial
# never starts" reports look.
STATUS_COUNTS = re.compile(r"(?:Number of trials: [^(]*\((?P<old>.*)\)|Trial status: (?P<new>.*))")
COUNT_PAIRS = re.compile(r"(\d+) ([A-Z_]+)|'([A-Z_]+)': (\d+)")
STATUS_USAGE = re.compile(
    r"(?:Resources requested|Logical resource usage): (?P<cpu>[\d.]+)/(?P<cpus>[\d.]+) CPUs?"
    r"(?:, (?P<gpu>[\d.]+)/(?P<gpus>[\d.]+) GPUs?)?"
)
RUNNING_FOR = re.compile(
    r"\(running for (?:(?P<days>\d+) days?, )?(?P<h>\d+):(?P<m>\d+):(?P<s>[\d.]+)"
)
TOTAL_RUNNING = re.compile(
    r"Total running time: (?:(?P<days>\d+)d )?(?:(?P<h>\d+)hr )?(?:(?P<m>\d+)min )?(?P<s>\d+)s"
)
# Long enough that a trial that fits would have started (its actor is up in a second or two).
MIN_PENDING_SECONDS = 10.0


def _status_block(experiment: Experiment) -> list[LogEvent]:
    """The last Tune status block the logs hold (one file's)."""
    status = [event for event in experiment.events if event.kind == TUNE_STATUS]
    if not status:
        return []
    last = status[-1].source.path
    return [event for event in status if event.source.path == last]


def _only_pending(line: str) -> int:
    """How many trials a status line counts when every one is PENDING; 0 otherwise."""
    found = STATUS_COUNTS.search(line)
    if found is None:
        return 0
    counts: dict[str, int] = {}
    for number, state, dict_state, dict_number in COUNT_PAIRS.findall(found["old"] or found["new"]):
        counts[state or dict_state] = int(number or dict_number)
    total = sum(counts.values())
    return total if total and counts.get(TrialStatus.PENDING.value) == total else 0


def _seconds(line: str) -> float | None:
    found = RUNNING_FOR.search(line) or TOTAL_RUNNING.search(line)
    if found is None:
        return None
    parts = found.groupdict()
    return (
        int(parts["days"] or 0) * 86400
        + int(parts["h"] or 0) * 3600
        + int(parts["m"] or 0) * 60
        + float(parts["s"])
    )


def _nothing_running(line: str) -> re.Match[str] | None:
    usage = STATUS_USAGE.search(line)
    if usage is None or float(usage["cpu"]) > 0 or float(usage["gpu"] or 0) > 0:
        return None
    return usage


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


FIX = (
    "Request what a node can give: lower `tune.with_resources(...)` / "
    "`ScalingConfig(num_workers=..., resources_per_worker=..., use_gpu=...)`, add nodes "
    "(or GPU node types) to the cluster, or free resources held by other jobs "
    "(`ray status` shows usage and pending demands)."
)


def _amounts(text: str) -> dict[str, float]:
    return {name: float(value) for name, value in AMOUNT.findall(text)}


def _request_fits_the_total(texts: list[str], joined: str) -> bool:
    """Whether the insufficient-resources manager's own numbers show every request it printed
    fits the cluster (`ASKED_AND_TOTAL`), and nothing but that message says resources."""
    found = [match for text in texts for match in ASKED_AND_TOTAL.finditer(text)]
    if not found or not all(
        float(cpus) <= float(has_cpus) and float(gpus) <= float(has_gpus)
        for cpus, gpus, has_cpus, has_gpus in (match.groups() for match in found)
    ):
        return False
    return not any(
        any_line(sig.pattern, texts, joined) for sig in WAITING if sig.label not in MANAGER_WORDINGS
    )


def _covered(required: str, remaining: str) -> bool:
    need, have = _amounts(required), _amounts(remaining)
    return bool(need) and all(have.get(name, 0.0) >= amount for name, amount in need.items())


class ResourcesInsufficient(SignatureRule):
    """Trials or a Train worker group never started: no node can give what they request.

    Symptom:
        The run sits PENDING: Tune warns "Insufficient cluster resources to launch trial" or
        "No trial is running and no new trial has been started within the last 60 seconds",
        Train says "Training has not started in the last 60 seconds … not having enough
        resources" or its worker group start times out, the autoscaler says "No available node
        types can fulfill resource request" or cannot launch a node because the cloud has
        none of that type to give (`InsufficientInstanceCapacity`,
        `ZONE_RESOURCE_POOL_EXHAUSTED`). Or, with none of those, Tune's last status shows
        every trial PENDING and none of the cluster's CPUs or GPUs in use, ten seconds or more
        into the run.
    Likely cause:
        A request that fits no node: more CPUs or GPUs per trial than any node has, `use_gpu`
        on a cluster without GPUs, a `ScalingConfig` asking for more workers than fit, a
        Train V1 trainer that needs a CPU of its own on top of its workers, or other jobs
        holding the resources. Such a request waits forever; it does not fail.
    Evidence it uses:
        Tune's, Train's and the autoscaler's warnings in the driver log and the Ray logs, with
        the resources asked for and those the cluster has when the text says. When Tune's own
        numbers show the request fits the cluster ("You asked for 2.0 CPUs … but the cluster
        only has 10.0 CPUs"), the warning came because no trial was waiting to start (all
        PAUSED, or a searcher that stopped giving trials), not for lack of resources: the rule
        stays silent, as it does for Ray 1.x's "cannot be scheduled" when the node's
        remaining resources cover the request. Tune's status block counts when it is the last
        one in its log ("Number of trials: 1/1 (1 PENDING)" with "Resources requested: 0/20
        CPUs" and "running for 00:08:20", or Ray 2.5+'s "Trial status: 4 PENDING" with
        "Logical resource usage: 0/2 CPUs" and "Total running time: 1min 5s"), and only when
        nothing else went wrong: no failure, and no trial the experiment state shows started.
        A run's first status looks the same for a moment, so under ten seconds it stays silent.
    Fix:
        Ask for what a node has: lower `resources_per_trial` / `tune.with_resources(...)` or
        `ScalingConfig(num_workers=..., resources_per_worker=..., use_gpu=...)` (for Train V1
        on a small cluster, `trainer_resources={"CPU": 0}`), add nodes or GPU node types to
        the autoscaler, or free the resources other jobs hold (`ray status` shows them).
    References:
        - https://docs.ray.io/en/latest/tune/tutorials/tune-resources.html
        - https://docs.ray.io/en/latest/train/user-guides/using-gpus.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "resources-insufficient"
    title = "Not enough cluster resources to start"
    severity = Severity.ERROR
    commands = ("inspect", "smoke")
    example = "fixtures/tune_insufficient_resources"
    signatures = WAITING

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        # Ray 1.x printed "cannot be scheduled right now" for requests the node could hold
        # (a scheduler race): when the node's remaining resources cover every requested one,
        # the numbers say it was not short.
        texts = texts_of(experiment, failure)
        joined = "\n".join(texts)
        if may_match(ASKED_AND_TOTAL, joined) and _request_fits_the_total(texts, joined):
            return True
        if not may_match(PLACEMENT, joined):
            return False
        for text in texts:
            placement = PLACEMENT.search(text)
            if placement and _covered(placement["required"], placement["remaining"]):
                return True
        return False

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        found = list(super().check(experiment))
        if not found:
            waiting = self._waiting(experiment)
            found = [waiting] if waiting is not None else []
        yield from found

    def _waiting(self, experiment: Experiment) -> Finding | None:
        """Tune's last status: every trial PENDING, nothing running, for a while; and nothing
        else went wrong (a failure, or a trial the experiment state shows started)."""
        if experiment.failures or any(
            t.failures or (t.in_state and t.status != TrialStatus.PENDING)
            for t in experiment.trials
        ):
            return None
        block = _status_block(experiment)
        counts = next((e for e in reversed(block) if STATUS_COUNTS.search(e.line)), None)
        usage = next(((e, m) for e in block if (m := _nothing_running(e.line))), None)
        clock = next(((e, t) for e in block if (t := _seconds(e.line)) is not None), None)
        if counts is None or usage is None or clock is None:
            return None
        (usage_line, held), (clock_line, seconds) = usage, clock
        pending = _only_pending(counts.line)
        if not pending or seconds < MIN_PENDING_SECONDS:
            return None
        cluster = f"{held['cpus']} CPUs" + (f", {held['gpus']} GPUs" if held["gpus"] else "")
        message = (
            f"{'The trial was' if pending == 1 else f'All {pending} trials were'} still "
            f"PENDING after {_elapsed(seconds)} of the run, "
            f"with none of the cluster's resources ({cluster}) in use (Tune's last status): "
            "what a trial asks for fits no node, or other work holds it."
        )
        return self.finding(
            experiment,
            message,
            FIX,
            [counts.source, usage_line.source, clock_line.source],
            subject=stop_subject(experiment),
        )

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        pending = [t for t in experiment.trials if t.status.value == "PENDING"]
        who = subject_name(experiment, hit.trial) if hit.trial else "The run"
        message = f"{who} could not start for lack of resources"
        tune = first_match(hit, TUNE_ASKED)
        asked = first_match(hit, ASKED)
        has = first_match(hit, HAS)
        if tune:
            message += f": it asked for {tune.group(1)}{tune.group(2) or ''}, the cluster has "
            message += tune.group(3)
        elif asked:
            message += f": it asked for {next(g for g in asked.groups() if g)}"
            if has:
                message += f", the cluster has {has.group(1)}"
        message += f" ({hit.signature.label})"
        if pending:
            message += f". {len(pending)} trial(s) are still PENDING on storage"
        message += "."
        if hit.signature.label == TRIAL_CHILD:
            kind, name = hit.match.group(1), hit.match.group(2)
            message = (
                f"{who} started a {kind} (`{name}`) that its placement group has no resources "
                f"for: Tune refused to launch it ({hit.evidence.excerpt})."
            )
            return message, (
                "A trial runs inside its own placement group, so the tasks and actors it starts "
                "need room reserved there: give the trainable extra bundles, "
                "`tune.with_resources(trainable, tune.PlacementGroupFactory([{'CPU': 1}] + "
                "[{'CPU': 1}] * N))` for N of them, or run that work in the trial's own process."
            )
        if hit.signature.label == CLOUD_CAPACITY:
            return message, (
                "The cloud had no instance of that type to give: let the autoscaler try other "
                "zones (list several subnets / zones for the node type), add a second node type "
                "that can serve the request, or retry later; on AWS a capacity reservation "
                "avoids it for GPU types."
            )
        if hit.signature.label == SLURM_NO_NODE:
            return message, (
                "No node of the partition has what the job asks of one node: compare "
                "`--gres=gpu:N`, `--gpus-per-node`, `--cpus-per-task` x `--ntasks-per-node` and "
                "`--mem` with the nodes (`sinfo -p PARTITION -O nodehost,gres:40,cpus,memory`), "
                "and check the GPU type named in `--gres`. Ask for what one node has, or more "
                "nodes with less on each."
            )
        if experiment.layout == Layout.TRAIN_V1 and hit.signature.label == "Train: not started":
            return message, (
                "Train V1 reserves a CPU for its trainer on top of every worker's: on a machine "
                "that has just enough for the workers, pass `ScalingConfig(num_workers=..., "
                'trainer_resources={"CPU": 0})`, or ask for fewer or smaller workers. ' + FIX
            )
        return message, FIX
