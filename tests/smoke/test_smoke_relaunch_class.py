"""--from with a Trainable class: wrapped by a subclass that samples memory from setup()."""

from smoke_runs import REPO, assert_nothing_left, run_smoke


def test_a_class_trainable_reproduces_and_is_measured(fixtures, tmp_path):
    experiment = fixtures / "tune_trial_error" / "ray_results" / "tune_trial_error"
    entrypoint = REPO / "tests" / "smoke" / "class_trainable.py"
    run = run_smoke(
        tmp_path, "--from", str(experiment), "--trial", "b0523_00002",
        "--entrypoint", f"{entrypoint}:DivergingTrainable",
    )  # fmt: skip
    assert run.returncode == 1, run.stdout
    (finding,) = run.findings("failure-reproduced")
    assert "ValueError: lr=0.1 is too large: loss diverged (trial-error)" in finding["message"]
    relaunch = run.report["relaunch"]
    assert relaunch["peak_host_rss_bytes"] > 64 * 2**20, "the 64 MiB the trial held"
    assert_nothing_left(run)
