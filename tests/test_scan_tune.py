"""The Tune reader on experiments real Ray 2.60 wrote (copied to another path first)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import experiment_dir

from ray_doctor.model import Layout, TrialStatus
from ray_doctor.scan import scan


def only_experiment(path: Path):
    result = scan(str(path))
    assert len(result.experiments) == 1
    return result, result.experiments[0]


def test_healthy_sweep_reads_every_trial_with_history_and_checkpoints(fixtures):
    result, exp = only_experiment(experiment_dir(fixtures, "tune_healthy"))
    assert result.layout == Layout.TUNE
    assert exp.state_file.startswith("experiment_state-")
    assert len(exp.trials) == 3
    for trial in exp.trials:
        assert trial.status == TrialStatus.TERMINATED
        assert trial.history.rows == 5
        assert (trial.history.first_iteration, trial.history.last_iteration) == (1, 5)
        assert trial.config.keys() >= {"lr"}
        assert trial.checkpoints, "checkpoints written every 2 iterations"
        # num_to_keep=2 deleted older checkpoint dirs; what is left exists on disk.
        on_disk = [c for c in trial.checkpoints if c.exists]
        assert all(Path(c.path).is_dir() for c in on_disk)
        assert all(c.iteration is not None for c in on_disk)
    assert not result.all_errors


def test_trial_paths_point_into_the_moved_copy(fixtures):
    _, exp = only_experiment(experiment_dir(fixtures, "tune_healthy"))
    for trial in exp.trials:
        assert trial.path.startswith(str(fixtures)), "absolute paths in the state are not used"
        assert Path(trial.path).is_dir()


def test_error_txt_gives_type_message_and_user_frame(fixtures):
    _, exp = only_experiment(experiment_dir(fixtures, "tune_trial_error"))
    failed = [t for t in exp.trials if t.status == TrialStatus.ERROR]
    assert len(failed) == 1
    (failure,) = failed[0].failures
    assert failure.number == 1
    assert failure.exc_type == "ValueError"
    assert failure.message == "lr=0.1 is too large: loss diverged"
    assert failure.user_frame.function == "before_report"
    assert failure.user_frame.file.endswith("generate.py")
    assert "\x1b[" not in failure.text, "ANSI colour codes are stripped"
    assert failure.source.line == 1 and failure.source.excerpt.startswith("Failure # 1")
    assert failed[0].config["lr"] == 0.1


def test_every_failure_block_of_a_retried_trial_is_read(fixtures):
    _, exp = only_experiment(experiment_dir(fixtures, "tune_retries_exhausted"))
    (trial,) = [t for t in exp.trials if t.status == TrialStatus.ERROR]
    assert trial.max_failures == 2
    assert [f.number for f in trial.failures] == [1, 2, 3]
    assert trial.num_failures == 3
    assert len({f.summary for f in trial.failures}) == 1


def test_restart_is_found_in_result_json(fixtures):
    _, exp = only_experiment(experiment_dir(fixtures, "tune_recovered"))
    (trial,) = exp.trials
    assert trial.status == TrialStatus.TERMINATED
    assert trial.failure_count == 1
    (restart,) = trial.history.restarts
    # The trial failed before reporting iteration 4 and resumed from the iteration-2 checkpoint.
    assert restart.to_iteration == 3
    assert restart.from_iteration == 3
    assert restart.iterations_lost == 1
    assert trial.history.rows == trial.history.max_iteration + restart.iterations_lost


def test_sigkilled_worker_is_an_actor_death(fixtures):
    _, exp = only_experiment(experiment_dir(fixtures, "tune_sigkill"))
    (trial,) = [t for t in exp.trials if t.status == TrialStatus.ERROR]
    (failure,) = trial.failures
    assert failure.exc_type == "ActorDiedError"
    assert "The actor died unexpectedly" in failure.message
    assert failure.exc_line is not None


def test_corrupt_checkpoint_restore_failure_is_read(fixtures):
    _, exp = only_experiment(experiment_dir(fixtures, "tune_corrupt_checkpoint"))
    (trial,) = exp.trials
    assert trial.status == TrialStatus.ERROR
    assert len(trial.failures) == 2
    assert "failed finding central directory" in trial.failures[-1].message


def test_killed_driver_leaves_trials_running_and_pending(fixtures):
    _, exp = only_experiment(experiment_dir(fixtures, "tune_driver_killed"))
    statuses = {t.status for t in exp.trials}
    assert statuses <= {TrialStatus.RUNNING, TrialStatus.PENDING}
    assert TrialStatus.RUNNING in statuses
    pending = [t for t in exp.trials if t.status == TrialStatus.PENDING]
    assert pending, "more trials than CPUs: some never started"
    assert all(t.history is None and not t.checkpoints for t in pending)
    running = [t for t in exp.trials if t.status == TrialStatus.RUNNING]
    assert all(t.history.rows > 0 for t in running)


def test_nan_metrics_are_found_with_their_first_iteration(fixtures):
    _, exp = only_experiment(experiment_dir(fixtures, "tune_nan_metrics"))
    bad = [t for t in exp.trials if t.history.nonfinite]
    assert len(bad) == 1
    first = bad[0].history.nonfinite[0]
    assert first.metric == "loss"
    assert first.value in ("NaN", "Infinity", "-Infinity")
    assert first.first_iteration is not None and first.first_iteration > 1
    healthy = [t for t in exp.trials if not t.history.nonfinite]
    assert all(t.history.nonfinite_rows == 0 for t in healthy)


def test_storage_path_with_several_experiments(fixtures, tmp_path):
    storage = tmp_path / "ray_results"
    storage.mkdir()
    for scenario in ("tune_healthy", "tune_trial_error"):
        (storage / scenario).symlink_to(experiment_dir(fixtures, scenario))
    result = scan(str(storage))
    assert result.layout == Layout.STORAGE
    assert sorted(e.name for e in result.experiments) == ["tune_healthy", "tune_trial_error"]


def test_single_trial_dir(fixtures):
    exp_dir = experiment_dir(fixtures, "tune_trial_error")
    trial_dir = next(p for p in exp_dir.iterdir() if (p / "error.txt").exists())
    result = scan(str(trial_dir))
    assert result.layout == Layout.TRIAL
    (trial,) = result.experiments[0].trials
    # No experiment state to say so, but the failure came after the last report.
    assert trial.status == TrialStatus.ERROR
    assert trial.failures[0].exc_type == "ValueError"
    assert trial.config["lr"] == 0.1, "config read from params.json"


def test_state_file_path_stands_for_its_experiment(fixtures):
    exp_dir = experiment_dir(fixtures, "tune_trial_error")
    state = next(exp_dir.glob("experiment_state-*.json"))
    result = scan(str(state))
    assert result.experiments[0].name == "tune_trial_error"
    assert len(result.experiments[0].trials) == 3


def test_configs_come_from_the_state_and_from_params_json_only_where_it_has_none(
    fixtures, tmp_path
):
    """params.json is read only for trials the state gives no config; without a state,
    every trial's config still comes from its params.json."""
    import json
    import shutil

    copy = tmp_path / "tune_healthy"
    shutil.copytree(experiment_dir(fixtures, "tune_healthy"), copy)
    params = {p.parent.name: json.loads(p.read_text()) for p in copy.glob("*/params.json")}
    assert len(params) == 3
    for path in copy.glob("*/params.json"):
        path.write_text("{not json")  # the state has every config: these are not read
    result, exp = only_experiment(copy)
    assert not result.all_errors
    assert {t.name: t.config for t in exp.trials} == params
    for path in copy.glob("*/params.json"):
        path.write_text(json.dumps(params[path.parent.name]))
    for state in copy.glob("experiment_state-*.json"):
        state.unlink()
    result, exp = only_experiment(copy)
    assert {t.name: t.config for t in exp.trials} == params
    (copy / next(iter(params)) / "params.json").write_text("{not json")
    result, exp = only_experiment(copy)
    assert any("params.json" in e.path and "not valid JSON" in e.reason for e in result.all_errors)


def test_an_earlier_run_under_the_same_name_is_left_out(fixtures):
    # Real Ray 2.60: two Tuner.fit calls with one name; the first run's lr=0.1 trial failed,
    # the second run (the newest state's) finished. Its report is the second run's.
    from conftest import experiment_dir, inspect_json, run_cli

    path = str(experiment_dir(fixtures, "tune_name_reused"))
    code, report = inspect_json(path)
    assert code == 0, report["findings"]
    (experiment,) = report["experiments"]
    assert len(experiment["earlier_run_trial_dirs"]) == 2
    assert all("_d6630_" in name for name in experiment["earlier_run_trial_dirs"])
    assert {t["trial_id"].split("_")[0] for t in report["trials"]} == {"dadf3"}
    shown = " ".join(run_cli("inspect", path).stdout.split())  # as read, not as wrapped
    assert "2 trial dirs of an earlier run under this name left out" in shown
    assert "resumed" not in shown


def test_unlisted_dirs_of_the_same_run_stay(fixtures):
    # tune_storage_full: the state never listed two of its own run's trials; they are judged.
    from conftest import experiment_dir, inspect_json

    _, report = inspect_json(str(experiment_dir(fixtures, "tune_storage_full")))
    assert report["experiments"][0]["earlier_run_trial_dirs"] == []
    assert report["summary"]["trials_by_status"]["UNKNOWN"] == 2


def test_a_resumed_experiment_started_when_its_first_run_did(fixtures):
    """Tuner.restore writes a newer experiment_state whose start_time is the restore's; the
    experiment and its trials started at the first run, and the report must say so."""
    path = experiment_dir(fixtures, "tune_resumed")
    states = sorted(path.glob("experiment_state-*.json"))
    assert len(states) == 2, "the first run's state and the restore's"
    first, restore = (json.loads(s.read_text())["stats"]["start_time"] for s in states)
    assert restore > first + 4, "the fixture's restore came 5 s after the first run"
    _, exp = only_experiment(path)
    assert first <= exp.start_time < restore
    assert all(t.start_time < restore for t in exp.trials), [t.start_time for t in exp.trials]
    # The newest state is still the one read: the restored trial finished.
    assert {t.status for t in exp.trials} == {TrialStatus.TERMINATED}
