"""failure-reproduced (smoke --from): tune_trial_error's trial fails again with its trainable."""


def test_the_fixture_failure_comes_back(relaunch_reproduced):
    run = relaunch_reproduced
    assert run.returncode == 1
    (finding,) = run.findings("failure-reproduced")
    assert finding["trial_id"] == "b0523_00002" and finding["experiment"] == "tune_trial_error"
    assert (
        "fails again with its own config, after 2 reported iterations, as the original"
        in finding["message"]
    )
    assert "ValueError: lr=0.1 is too large: loss diverged (trial-error)" in finding["message"]
    assert finding["evidence"][0]["excerpt"].startswith("original: trial-error:")
    assert "retrying will not help" in finding["fix"]
    assert [r["rule"] for r in finding["related"]] == ["trial-error"]


def test_the_relaunch_record(relaunch_reproduced):
    relaunch = relaunch_reproduced.report["relaunch"]
    assert relaunch["outcome"] == "reproduced"
    assert relaunch["config"] == {"lr": 0.1}
    assert relaunch["resources"] == [{"CPU": 1.0}]
    assert relaunch["iterations"] == 3 and relaunch["iterations_reached"] == 2
    assert relaunch["peak_host_rss_bytes"] > 50 * 2**20  # a Python process with torch loaded
    assert [s["name"] for s in relaunch_reproduced.report["stages"]] == [
        "cluster",
        "relaunch",
        "environment",
    ]


def test_near_miss_stopped_before_the_failing_step(relaunch_too_short):
    assert not relaunch_too_short.findings("failure-reproduced")


def test_the_rule_page_example_is_what_smoke_says(relaunch_reproduced):
    from smoke_runs import assert_matches_doc_example

    assert_matches_doc_example("failure-reproduced", relaunch_reproduced)
