"""failure-changed (smoke --from): the trial's config, re-run with a trainable that has since
changed, fails of a missing module instead of the original ValueError."""


def test_a_different_cause_is_named_against_the_original(relaunch_changed):
    run = relaunch_changed
    assert run.returncode == 1
    (finding,) = run.findings("failure-changed")
    assert "ModuleNotFoundError" in finding["message"] and "(missing-module)" in finding["message"]
    assert "the original had trial-error" in finding["message"]
    assert finding["fix"].startswith("Fix this failure first:")
    assert run.report["relaunch"]["outcome"] == "different"
    assert not run.findings("failure-reproduced")


def test_near_miss_the_same_cause(relaunch_reproduced):
    assert not relaunch_reproduced.findings("failure-changed")


def test_the_rule_page_example_is_what_smoke_says(relaunch_changed):
    from smoke_runs import assert_matches_doc_example

    assert_matches_doc_example("failure-changed", relaunch_changed)
