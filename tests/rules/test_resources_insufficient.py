"""resources-insufficient: a GPU trial on a CPU-only cluster, Tune and Train V2 (real runs)."""

import pytest
from conftest import FIXTURES, corpus_excerpt, experiment_dir, findings_of, inspect_json


def test_tune_says_what_was_asked_and_what_exists(fixtures):
    base = fixtures / "tune_insufficient_resources"
    code, report = inspect_json(
        str(experiment_dir(fixtures, "tune_insufficient_resources")),
        "--logs",
        str(base / "driver.log"),
    )
    assert code == 1
    (finding,) = findings_of(report, "resources-insufficient")
    assert "1.0 GPUs per trial" in finding["message"] and "0 GPUs" in finding["message"]
    assert "still PENDING" in finding["message"]
    assert not findings_of(report, "trial-incomplete"), "the stop is explained, not repeated"


def test_train_v2_worker_group_never_started(fixtures):
    base = fixtures / "train_v2_insufficient_resources"
    assert (FIXTURES / "train_v2_insufficient_resources").is_dir()
    code, report = inspect_json(
        str(experiment_dir(fixtures, "train_v2_insufficient_resources")),
        "--logs",
        str(base / "driver.log"),
    )
    assert code == 1
    (finding,) = findings_of(report, "resources-insufficient")
    assert finding["severity"] == "error"
    assert "GPU" in finding["message"]


def test_near_miss_trials_queued_for_busy_cpus(fixtures):
    # More trials than CPUs: they wait their turn, which is not a lack of resources.
    base = fixtures / "tune_driver_killed"
    _, report = inspect_json(
        str(experiment_dir(fixtures, "tune_driver_killed")), "--logs", str(base / "driver.log")
    )
    assert not findings_of(report, "resources-insufficient")


@pytest.mark.ray_compat
def test_smoke_gpu_request_on_a_cpu_only_cluster(smoke_no_gpu):
    (finding,) = smoke_no_gpu.findings("resources-insufficient")
    assert finding["evidence"][0]["path"].startswith("node ")
    assert "0 GPUs" in finding["evidence"][0]["excerpt"]


@pytest.mark.ray_compat
def test_smoke_near_miss_a_request_that_fits(smoke_cpu):
    assert not smoke_cpu.findings("resources-insufficient")


# Ray 2.x's insufficient-resources manager, as printed when no trial is PENDING (every trial
# PAUSED after a restore, ray #39900): its own numbers show the request fits the cluster.
MANAGER_FITS = (
    "(TunerInternal pid=1) 2023-09-26 10:00:00,000\tWARNING insufficient_resources_manager.py:163"
    " -- Ignore this message if the cluster is autoscaling. No trial is running and no new trial "
    "has been started within the last 60 seconds. This could be due to the cluster not having "
    "enough resources available. You asked for 2.0 CPUs and 0 GPUs per trial, but the cluster "
    "only has 10.0 CPUs and 0 GPUs available. Stop the tuning and adjust the required resources "
    "(e.g. via the `ScalingConfig` or `resources_per_trial`, or `num_workers` for rllib), or add "
    "more resources to your cluster.\n"
)


def test_near_miss_tune_warns_although_its_numbers_show_the_request_fits():
    _, report = inspect_json("-", stdin=MANAGER_FITS)
    assert not findings_of(report, "resources-insufficient")


def test_tune_numbers_that_show_the_request_too_big_still_fire():
    text = MANAGER_FITS.replace("2.0 CPUs and 0 GPUs per trial", "2.0 CPUs and 1.0 GPUs per trial")
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "resources-insufficient")
    assert "1.0 GPUs per trial" in finding["message"]


def test_another_resource_warning_beside_a_fitting_request_still_fires():
    text = MANAGER_FITS + (
        "(autoscaler +1m) Error: No available node types can fulfill resource request "
        "{'CPU': 64.0}. Add suitable node types to this cluster to resolve this issue.\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "resources-insufficient")


def test_the_cloud_out_of_capacity_gets_its_own_fix():
    # The node type exists; the cloud had none to give (ray #57207).
    text = (
        "[autoscaler] Launching instances failed: NewInstances[g3.8xlarge;num:1]: could not "
        "launch any instances: api error InsufficientInstanceCapacity: We currently do not have "
        "sufficient g3.8xlarge capacity in the Availability Zone you requested (us-west-2c).\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "resources-insufficient")
    assert "out of capacity" in finding["message"]
    assert "zones" in finding["fix"]


def test_near_miss_ray_status_with_placement_groups_pending():
    # Tune makes a placement group per trial, so a sweep with more trials than fit at once has
    # "1+ pending placement groups" in every autoscaler status until its queue drains: healthy.
    # The same line in a stuck run (ray #47792) is a known miss, not a claim.
    text = "Demands:\n {'CPU': 2.0} * 1 (SPREAD): 1+ pending placement groups\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "resources-insufficient")


def test_near_miss_ray_status_with_tasks_queued_only():
    # Tasks waiting for busy CPUs are a busy cluster, not one too small.
    text = "Demands:\n {'CPU': 1.0}: 150+ pending tasks/actors\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "resources-insufficient")


def test_a_library_giving_up_on_its_placement_group():
    # TorchX's Ray scheduler (torchx #520).
    text = (
        "TimeoutError: Placement group creation timed out. Make sure your cluster either has "
        "enough resources or use an autoscaling cluster. Current resources available: "
        "{'CPU': 8.0, 'GPU': 1.0}, resources requested by the placement group: "
        "[{'CPU': 2}, {'CPU': 2}, {'CPU': 2}, {'CPU': 2}, {'CPU': 2}]\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "resources-insufficient")


# Tune's last status block with every trial PENDING and nothing running: how most "my trial
# never starts" reports look. Real text: a public report (ray #29940, Ray 2.0's reporter) and
# the first status of a real Ray 2.60 run (fixtures/tune_driver_killed/driver.log).
PENDING_FOR_MINUTES = "ray/29940-torchtrainer-8gpu-workers-pending.txt"


def _first_status() -> str:
    lines = (FIXTURES / "tune_driver_killed" / "driver.log").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Trial status:"))
    return "\n".join(lines[start : start + 9]) + "\n"


def test_every_trial_pending_for_minutes_with_nothing_running():
    code, report = inspect_json("-", stdin=corpus_excerpt(PENDING_FOR_MINUTES))
    assert code == 1
    (finding,) = findings_of(report, "resources-insufficient")
    assert "still PENDING after 8 min 20 s" in finding["message"]
    assert "20 CPUs, 1 GPUs" in finding["message"]
    assert [e["excerpt"].split(":")[0] for e in finding["evidence"]] == [
        "Number of trials", "Resources requested", "Current time",
    ]  # fmt: skip


def test_near_miss_the_first_status_of_a_run_that_starts():
    # Ray 2.60's first status: four PENDING trials at 0 s, their CPUs already reserved.
    _, report = inspect_json("-", stdin=_first_status())
    assert not findings_of(report, "resources-insufficient")


def test_the_new_reporter_after_a_minute_with_nothing_running():
    text = (
        _first_status()
        .replace("Total running time: 0s", "Total running time: 1min 5s")
        .replace("2.0/2 CPUs", "0/2 CPUs")
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "resources-insufficient")
    assert "All 4 trials were still PENDING after 1 min 5 s" in finding["message"]


def test_near_miss_a_later_status_shows_a_trial_running():
    later = (
        "\nTrial status: 1 RUNNING | 3 PENDING\n"
        "Current time: 2026-11-22 06:31:06. Total running time: 2min 0s\n"
        "Logical resource usage: 1.0/2 CPUs, 0/0 GPUs\n"
    )
    stuck = _first_status().replace("Total running time: 0s", "Total running time: 1min 5s")
    _, report = inspect_json("-", stdin=stuck.replace("2.0/2 CPUs", "0/2 CPUs") + later)
    assert not findings_of(report, "resources-insufficient")


def test_near_miss_a_trial_failed():
    # A failure explains the run; a stale status beside it says nothing more.
    failure = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "ValueError: bad config\n"
    )
    _, report = inspect_json("-", stdin=corpus_excerpt(PENDING_FOR_MINUTES) + failure)
    assert not findings_of(report, "resources-insufficient")


def test_the_last_status_is_found_past_the_event_cap(tmp_path):
    # Hours of warnings fill the log's event cap (2,000 lines); the status at its end counts.
    noise = "".join(
        f"2026-11-22 06:{i // 60 % 60:02d}:{i % 60:02d},000\tWARNING worker.py:1 -- task {i} "
        f"timed out, retrying{'.' * (i % 7)}\n"  # lengths vary: no terminal wrapping
        for i in range(12_000)  # three batches of the reader, and more than its tail
    )
    log = tmp_path / "driver.log"
    log.write_text(_first_status() + noise + corpus_excerpt(PENDING_FOR_MINUTES))
    _, report = inspect_json(str(log))
    (finding,) = findings_of(report, "resources-insufficient")
    assert "8 min 20 s" in finding["message"]


def test_trials_a_time_budget_ended_before_they_started_did_not_finish(fixtures):
    # Tune writes the waiting trials TERMINATED: that is no run that finished after all.
    base = fixtures / "tune_time_budget_pending"
    code, report = inspect_json(
        str(experiment_dir(fixtures, "tune_time_budget_pending")),
        "--logs",
        str(base / "driver.log"),
    )
    assert code == 1
    (finding,) = findings_of(report, "resources-insufficient")
    assert finding["severity"] == "error"
    assert "still finished" not in finding["message"]


# Ray 2.50.1 Train V1, a 2-worker TorchTrainer on a 2-CPU machine: the trainer's own CPU
# makes 3 (a real run's driver line, its timestamp kept).
TRAIN_V1_NOT_STARTED = (
    "2026-11-26 05:26:25,126\tWARNING insufficient_resources_manager.py:163 -- Ignore this "
    "message if the cluster is autoscaling. Training has not started in the last 60 seconds. "
    "This could be due to the cluster not having enough resources available. You asked for 3.0 "
    "CPUs and 0 GPUs, but the cluster only has 2.0 CPUs and 0 GPUs available. Stop the training "
    "and adjust the required resources (e.g. via the `ScalingConfig` or `resources_per_trial`, "
    "or `num_workers` for rllib), or add more resources to your cluster.\n"
)


def test_train_says_what_it_asked_and_what_the_cluster_has():
    _, report = inspect_json("-", stdin=TRAIN_V1_NOT_STARTED)
    (finding,) = findings_of(report, "resources-insufficient")
    assert (
        "asked for 3.0 CPUs and 0 GPUs, the cluster has 2.0 CPUs and 0 GPUs" in (finding["message"])
    )


def test_a_train_v1_run_is_told_about_the_trainers_own_cpu(fixtures, tmp_path):
    log = tmp_path / "driver.log"
    log.write_text(TRAIN_V1_NOT_STARTED)
    _, report = inspect_json(
        str(experiment_dir(fixtures, "ray2_46_train_v1_error")), "--logs", str(log)
    )
    (finding,) = findings_of(report, "resources-insufficient")
    assert 'trainer_resources={"CPU": 0}' in finding["fix"]


def test_a_task_a_trial_starts_outside_its_placement_group():
    # Ray 2.60's error.txt line when a trial's function calls a remote task (a real run).
    text = (
        "RuntimeError: No trial resources are available for launching the task "
        "`drv5.load_shard`. To resolve this, specify the Tune option:\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "resources-insufficient")
    assert "started a task (`drv5.load_shard`)" in finding["message"]
    assert "PlacementGroupFactory" in finding["fix"]


def test_near_miss_paused_trials_the_scheduler_never_resumed():
    """Tune 0.x raised this when no trial ran and its scheduler chose none to run while one
    was PAUSED (trial_executor.on_no_available_trials): a paused trial holds no resources, so
    the scheduler (HyperBand's brackets, ray #6780) kept it waiting, whatever the words say."""
    text = (
        "ray.tune.error.TuneError: There are paused trials, but no more pending trials with "
        "sufficient resources.\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "resources-insufficient")
    assert "There are paused trials" in findings_of(report, "trial-error")[0]["message"]
    assert code == 1


def test_nemo_rl_asks_for_more_gpus_than_the_cluster_has():
    """NeMo RL checks the Ray cluster's GPUs before placing its groups (NeMo RL #89)."""
    text = (
        "ValueError: Not enough GPUs available. Requested 16 GPUs, but only 8 are available in "
        "the cluster.\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert findings_of(report, "resources-insufficient")


def test_the_autoscaler_finding_no_node_type_for_a_request():
    """ray #14544: trials asking for a GPU on a Kubernetes cluster with no GPU node type."""
    text = (
        "example-cluster:2021-03-08 18:41:56,922\tWARNING resource_demand_scheduler.py:643 -- The "
        "autoscaler could not find a node type to satisfy the request: [{'GPU': 1.0, 'CPU': "
        "1.0}, {'GPU': 1.0, 'CPU': 1.0}]. If this request is related to placement groups the "
        "resource request will resolve itself, otherwise please specify a node type with the "
        "necessary resource\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert report["findings"][0]["rule"] == "resources-insufficient"
    # A request pinned to one node by its id waits on that node, not on a node type.
    pinned = text.replace("[{'GPU': 1.0, 'CPU': 1.0}, ", "[{'node:10.0.0.5': 0.001}, ")
    _, report = inspect_json("-", stdin=pinned)
    assert not findings_of(report, "resources-insufficient")


def test_slurm_refuses_a_job_no_node_can_hold():
    """Slurm rejects at submission a per-node request no node of the partition has (an 8-GPU
    request on 4-GPU nodes, MLCommons training #824, as posted): waiting would never start it."""
    text = (
        "sbatch: error: Batch job submission failed: Requested node configuration is not "
        "available\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "resources-insufficient")
    assert "sinfo" in finding["fix"] and "--gres" in finding["fix"]
