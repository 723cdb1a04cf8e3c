"""Smoke's pieces that need no Ray: argument checks, placement, planning a re-run safely."""

import json
import pickle
import shutil
from pathlib import Path

import pytest
from conftest import experiment_dir, run_cli, validate

from ray_doctor.smoke import SmokeFailure, SmokeOptions, plan_relaunch
from ray_doctor.smoke._resources import NodeResources, place

pytestmark = pytest.mark.ray_compat  # no Ray: cheap everywhere, and imports smoke on each Ray


def _node(name: str, **resources: float) -> NodeResources:
    return NodeResources(name, f"10.0.0.{len(name)}", name, resources)


def test_placement_packs_workers_across_nodes():
    nodes = [_node("a", CPU=8, GPU=4), _node("bb", CPU=8, GPU=4)]
    assert place([{"CPU": 1, "GPU": 1}] * 8, nodes) == []
    assert place([{"CPU": 1, "GPU": 1}] * 9, nodes) == [{"CPU": 1, "GPU": 1}]
    # Enough CPUs in all, but no single node has 12: a worker cannot span nodes.
    assert place([{"CPU": 12}], [_node("a", CPU=8), _node("bb", CPU=8)]) == [{"CPU": 12}]


def test_gpu_workers_need_whole_gpus_and_say_why():
    proc = run_cli("smoke", "--gpus", "1", "--workers", "2")
    assert proc.returncode == 2
    assert "NCCL refuses two ranks on one GPU" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stage", "warp-drive"], "unknown stage 'warp-drive'"),
        (["--trial", "x"], "--from, --trial and --entrypoint go together"),
        (["--memory-fraction", "1.5"], "--memory-fraction must be in (0, 1]"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    proc = run_cli("smoke", *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_bad_arguments_still_give_a_json_report():
    proc = run_cli("smoke", "--stage", "warp-drive", "--format", "json")
    report = validate(json.loads(proc.stdout))
    assert report["command"] == "smoke" and report["summary"]["exit_code"] == 2
    assert "unknown stage" in report["errors"][0]["reason"]


def test_relaunch_plan_reads_config_and_resources_of_the_trial(fixtures):
    experiment = experiment_dir(fixtures, "tune_trial_error")
    plan = plan_relaunch(str(experiment), "b0523_00002", "train.py:main", None, [])
    assert plan.config == {"lr": 0.1}  # params.json
    assert plan.resources == [{"CPU": 1.0}]
    assert "read without unpickling" in plan.resources_from
    assert plan.original["rule"] == "trial-error" and plan.original["exc_type"] == "ValueError"
    assert plan.original_iterations == 2 and plan.iterations == 3  # up to where it failed


def test_relaunch_plan_never_unpickles_the_placement_group(fixtures, tmp_path):
    """A state whose pickled placement group would run code: it is read, never run."""
    source = experiment_dir(fixtures, "tune_trial_error")
    experiment = tmp_path / "tune_trial_error"
    shutil.copytree(source, experiment)
    canary = tmp_path / "canary"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (canary,))

    (state_path,) = experiment.glob("experiment_state-*.json")
    state = json.loads(state_path.read_text())
    for pair in state["trial_data"]:
        trial = json.loads(pair[0])
        trial["placement_group_factory"] = pickle.dumps(Payload()).hex()
        pair[0] = json.dumps(trial)
    state_path.write_text(json.dumps(state))
    plan = plan_relaunch(str(experiment), "b0523_00002", "train.py:main", None, [])
    assert not canary.exists()
    assert plan.resources == [{"CPU": 1.0}] and plan.resources_from.startswith("default")


@pytest.mark.parametrize(
    ("scenario", "trial", "message"),
    [
        ("tune_trial_error", "nope_00009", "no trial 'nope_00009'"),
        ("train_v2_rank_failure", None, "--from re-runs Tune trials"),
    ],
)
def test_relaunch_plan_refuses_what_it_cannot_rerun(fixtures, scenario, trial, message):
    experiment = experiment_dir(fixtures, scenario)
    if trial is None:
        from ray_doctor.scan import scan

        trial = scan(str(experiment)).experiments[0].trials[0].trial_id
    with pytest.raises(SmokeFailure, match=message):
        plan_relaunch(str(experiment), trial, "train.py:main", None, [])


def test_options_round_trip_through_the_runner_file():
    options = SmokeOptions(gpus=2, workers=2, stages=("cluster", "collective"))
    assert SmokeOptions.from_json(json.loads(json.dumps(options.to_json()))) == options
    assert options.gpus_per_worker == 1.0


def test_the_stages_are_what_their_modules_declare():
    from ray_doctor.smoke import default_stages, titles

    assert default_stages(False) == (
        "cluster", "device", "collective", "checkpoint", "port", "environment",
    )  # fmt: skip
    assert default_stages(True) == ("cluster", "relaunch", "environment")
    assert list(titles()) == [
        "cluster", "device", "collective", "checkpoint", "port", "relaunch", "environment",
    ]  # fmt: skip


NEW_STAGE = """
from ray_doctor.smoke._model import StageResult, StageStatus
from ray_doctor.smoke.stages import LAST, Stage


def run(ctx):
    return StageResult("hello", StageStatus.PASS, message="hello from a new stage")


STAGE = Stage("hello", "a stage a newcomer added", position=7, run=run, phase=LAST)
"""


def test_a_new_stage_is_one_module(tmp_path, monkeypatch):
    # A module dropped beside the others (here: a second folder of the package) is a stage:
    # listed, accepted by --stage, titled in the report, run by the runner's LAST phase.
    from ray_doctor.smoke import stages, titles, validate

    (tmp_path / "hello.py").write_text(NEW_STAGE)
    monkeypatch.setattr(stages, "__path__", [*stages.__path__, str(tmp_path)])
    stages.registry.cache_clear()
    try:
        assert list(titles())[-1] == "hello"
        validate(SmokeOptions(stages=("cluster", "hello")))
        assert stages.registry()["hello"].run(None).title == "a stage a newcomer added"
        assert "hello" not in stages.default_stages()
    finally:
        stages.registry.cache_clear()


def test_a_python_whose_path_has_a_space_is_refused_before_ray_starts(tmp_path):
    # Ray 2.10+ starts each Tune trial's worker with `bash -c "exec <python> ..."`, the
    # interpreter's path unquoted: from such a Python no trial starts and a run waits forever.
    import subprocess
    import sys

    from ray_doctor.smoke._compat import FIRST_UNQUOTED_RAY, _ray_release, unstartable_interpreter

    spaced = tmp_path / "my envs" / "venv"
    spaced.parent.mkdir()
    spaced.symlink_to(sys.prefix, target_is_directory=True)  # the same venv, by another path
    python = str(spaced / "bin" / "python")
    release = _ray_release()
    if release is None or release < FIRST_UNQUOTED_RAY:
        assert unstartable_interpreter(python) is None  # Ray 2.9 escaped the path
        return
    assert python in unstartable_interpreter(python)
    proc = subprocess.run(
        [python, "-m", "ray_doctor", "smoke", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "path without spaces" in proc.stderr
    assert "Traceback" not in proc.stderr
    # A path without one is not refused.
    assert unstartable_interpreter("/opt/venvs/train-3.11/bin/python") is None
