"""collective-desync: real Ray Train V2 (gloo) runs with Flight Recorder on, torchrun's error
files, and the near-misses (a healthy job, a slow but completed collective)."""

from __future__ import annotations

import shutil

from conftest import canary_pickle, experiment_dir, findings_of, inspect_json


def _inspect_fixture(fixtures, scenario: str) -> tuple[int, dict]:
    base = fixtures / scenario
    args = [str(experiment_dir(fixtures, scenario))]
    for name in ("driver.log", "session_logs", "fr_dumps"):
        if (base / name).exists():
            args += ["--logs", str(base / name)]
    return inspect_json(*args)


def _headline(report: dict) -> dict:
    assert report["findings"], "no finding"
    return report["findings"][0]


def test_rank_that_skipped_the_all_reduce_is_the_headline(fixtures):
    code, report = _inspect_fixture(fixtures, "train_v2_fr_skipped_collective")
    assert code == 1
    finding = _headline(report)
    assert finding["rule"] == "collective-desync"
    message = finding["message"]
    assert "Rank 1 never reached collective #16 gloo:all_reduce" in message
    assert "sizes [1], Float while rank 0 was waiting in it" in message
    assert "last collective #15" in message, "the culprit's own last collective"
    assert "skips the epoch-2 all_reduce" in message, "the culprit's last log line"
    related = {r["rule"] for r in finding["related"]}
    assert "collective-timeout" in related, "the victim's timeout folds under the culprit"
    assert not findings_of(report, "collective-timeout")
    assert any("fr_dumps/rank_1" in e["path"] for e in finding["evidence"])


def test_json_and_pickle_dumps_give_the_same_answer(fixtures, tmp_path):
    source = fixtures / "train_v2_fr_skipped_collective" / "fr_dumps"
    messages = []
    for kind, pattern in (("json", "rank_*.json"), ("pickle", "rank_[0-9]")):
        target = tmp_path / kind
        target.mkdir()
        for path in source.glob(pattern):
            shutil.copy(path, target / path.name)
        _code, report = inspect_json(str(target))
        (finding,) = findings_of(report, "collective-desync")
        assert f"rank 1 ({kind})" in str(finding["evidence"])
        messages.append(finding["message"])
    assert messages[0] == messages[1]
    assert "Rank 1 never reached collective #16" in messages[0]
    assert "no per-rank log lines" in messages[0], "says what evidence it did not have"


def test_dumps_inside_a_logs_dir_join_the_train_v2_run(fixtures):
    base = fixtures / "train_v2_fr_skipped_collective"
    _, report = inspect_json(str(experiment_dir(fixtures, base.name)), "--logs", str(base))
    finding = _headline(report)
    assert finding["rule"] == "collective-desync"
    assert finding["trial_id"], "joined to the Train V2 run"
    assert "Rank 1 never reached collective #16" in finding["message"]


def test_one_rank_dump_and_the_driver_log_say_what_is_missing(fixtures, tmp_path):
    base = fixtures / "train_v2_fr_skipped_collective"
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    shutil.copy(base / "fr_dumps" / "rank_0.json", dumps / "rank_0.json")
    _, report = inspect_json(
        str(experiment_dir(fixtures, base.name)),
        "--logs",
        str(base / "driver.log"),
        "--logs",
        str(dumps),
    )
    (finding,) = findings_of(report, "collective-desync")
    assert "Rank 0 was in collective #16 gloo:all_reduce" in finding["message"]
    assert "no Flight Recorder dump from rank 1" in finding["message"]


def test_ranks_that_disagree_on_the_shape_are_a_desync(fixtures):
    code, report = _inspect_fixture(fixtures, "train_v2_fr_shape_mismatch")
    assert code == 1
    finding = _headline(report)
    assert finding["rule"] == "collective-desync"
    message = finding["message"]
    assert "Desync at collective #16 on process group 0" in message
    assert "rank 0 called gloo:all_reduce with sizes [4], Float" in message
    assert "rank 1 called gloo:all_reduce with sizes [6], Float" in message
    assert "Rank 0 died first: it was killed by SIGABRT" in message


def test_rank_killed_mid_collective_died_first(fixtures):
    code, report = _inspect_fixture(fixtures, "train_v2_fr_rank_killed")
    assert code == 1
    finding = _headline(report)
    assert finding["rule"] == "collective-desync"
    message = finding["message"]
    assert "Rank 1 died first" in message
    assert "Rank 0 was in collective #16 gloo:all_reduce" in message
    assert "no Flight Recorder dump from rank 1" in message


def test_torchrun_error_files_and_report_name_the_first_rank(fixtures):
    base = fixtures / "torchrun_rank_error"
    code, report = inspect_json(str(base / "driver.log"), "--logs", str(base))
    assert code == 1
    finding = _headline(report)
    assert finding["rule"] == "collective-desync"
    assert "Rank 1 died first: it raised ValueError: Found NaN" in finding["message"]


def test_a_torchelastic_error_file_on_its_own(fixtures):
    path = fixtures / "torchrun_rank_error" / "attempt_0" / "1" / "error.json"
    code, report = inspect_json(str(path))
    (finding,) = findings_of(report, "collective-desync")
    assert "Rank 1 died first: it raised ValueError" in finding["message"]
    assert "no Flight Recorder dumps" in finding["message"]
    assert code == 1


def test_near_miss_healthy_job_with_a_slow_collective(fixtures):
    """Every rank completed every collective; one arrived 3 s late (not a hang)."""
    dumps = fixtures / "fr_healthy_slow_collective"
    assert sorted(p.name for p in dumps.iterdir()) == ["rank_0.json", "rank_1.json"]
    code, report = inspect_json(str(dumps))
    assert code == 0
    assert not report["findings"]
    assert not report["errors"]


def test_malicious_pickle_named_like_a_dump_is_reported_never_run(fixtures, tmp_path):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    shutil.copy(fixtures / "train_v2_fr_skipped_collective" / "fr_dumps" / "rank_0", dumps)
    canary = tmp_path / "CANARY"
    (dumps / "rank_1").write_bytes(canary_pickle(canary))
    code, report = inspect_json(str(dumps))
    assert not canary.exists(), "a pickle from the inspected data was executed"
    reasons = [e["reason"] for e in report["errors"] if e["path"].endswith("rank_1")]
    assert reasons and "io.open" in reasons[0] and "not loaded" in reasons[0]
    assert code in (0, 1)


def test_committed_malicious_dump_is_reported(fixtures, tmp_path):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    shutil.copy(fixtures / "edited" / "nccl_trace_rank_1", dumps)
    shutil.copy(fixtures / "train_v2_fr_skipped_collective" / "fr_dumps" / "rank_0.json", dumps)
    _, report = inspect_json(str(dumps))
    reasons = [e["reason"] for e in report["errors"]]
    assert any("posix.system" in r and "not loaded" in r for r in reasons), reasons
    assert not findings_of(report, "collective-desync"), "one rank's dump alone accuses nobody"


def test_garbled_json_dump_is_a_clear_error(tmp_path):
    (tmp_path / "rank_0.json").write_text('{"entries": [')
    code, report = inspect_json(str(tmp_path))
    assert any("not valid JSON" in e["reason"] for e in report["errors"])
    assert code in (0, 3)
