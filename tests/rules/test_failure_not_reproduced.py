"""failure-not-reproduced (smoke --from): the config runs clean, here because the re-run was
stopped before the step where the original failed."""


def test_a_clean_rerun_is_a_warning_that_says_why(relaunch_too_short):
    run = relaunch_too_short
    assert run.returncode == 0  # a warning: below the default --fail-on error
    (finding,) = run.findings("failure-not-reproduced")
    assert finding["severity"] == "warning"
    assert "ran 2 iterations with its own config without failing" in finding["message"]
    assert "raise --iterations" in finding["message"]
    assert run.report["relaunch"]["outcome"] == "not-reproduced"


def test_near_miss_a_failure_that_comes_back(relaunch_reproduced):
    assert not relaunch_reproduced.findings("failure-not-reproduced")


def test_the_rule_page_example_is_what_smoke_says(relaunch_too_short):
    from smoke_runs import assert_matches_doc_example

    assert_matches_doc_example("failure-not-reproduced", relaunch_too_short)
