"""trial-error: positive cases from real Ray output, and near-misses that must stay silent."""

from conftest import experiment_dir, findings_of, inspect_json


def test_fires_on_a_trial_that_raised(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_trial_error")))
    (finding,) = findings_of(report, "trial-error")
    errored = [t for t in report["trials"] if t["status"] == "ERROR"]
    assert finding["trial_id"] == errored[0]["trial_id"]
    assert "ValueError: lr=0.1 is too large: loss diverged" in finding["message"]
    assert "before_report" in finding["message"], "names the user frame"
    assert "before_report" in finding["fix"]


def test_unknown_error_is_reported_as_unknown_with_its_text():
    # Nothing in the catalogue explains this Ray error: no cause is guessed, the text is given.
    text = "ray.exceptions.RaySystemError: System error: Failed to unpickle serialized exception\n"
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = report["findings"]
    assert finding["rule"] == "trial-error"
    assert (
        "RaySystemError: System error: Failed to unpickle serialized exception"
        in finding["message"]
    )
    assert "knows no specific cause" in finding["fix"]


def test_is_folded_under_a_specific_cause(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_sigkill")))
    assert not findings_of(report, "trial-error")
    assert any(r["rule"] == "trial-error" for f in report["findings"] for r in f["related"])


def test_a_worker_that_crashed_is_named_with_the_crash_from_its_log(fixtures):
    # Real Ray 2.60: the trial's worker read address 0 (SIGSEGV); error.txt holds only Ray's
    # "The actor died unexpectedly", the crash is in the worker's own log.
    base = fixtures / "tune_worker_segfault"
    experiment = str(experiment_dir(fixtures, "tune_worker_segfault"))
    for logs in ("driver.log", "session_logs"):
        _, report = inspect_json(experiment, "--logs", str(base / logs))
        (finding,) = findings_of(report, "trial-error")
        message = finding["message"]
        assert "ActorDiedError: The actor died unexpectedly before finishing this task." in message
        assert "crashed: the log shows" in message and "SIGSEGV received" in message, logs
        assert "task.." not in message
        pid = message.split("(pid ")[1].split(")")[0]
        assert f"pid: {pid}" in (next(base.rglob("error.txt"))).read_text(), "the same worker"
        assert any(e["path"].endswith(logs) or logs in e["path"] for e in finding["evidence"])
        assert "faulthandler" in finding["fix"]
        assert not findings_of(report, "oom-killed-by-os"), "a crash, not a kill"


def test_a_train_rank_that_crashed_is_named_beside_the_error_the_others_saw(fixtures):
    # Real Ray 2.60 Train V2: rank 1 segfaulted; Train reports rank 0's gloo error first.
    base = fixtures / "train_v2_worker_segfault"
    log = (base / "driver.log").read_text()
    _, report = inspect_json(
        str(experiment_dir(fixtures, "train_v2_worker_segfault")),
        "--logs",
        str(base / "driver.log"),
    )
    (finding,) = findings_of(report, "trial-error")
    assert "Connection closed by peer" in finding["message"]
    pid = finding["message"].split("Rank 1's worker process (pid ")[1].split(")")[0]
    assert f"pid={pid}) world_rank=1" in log, "the pid the controller listed as rank 1"
    assert "SIGSEGV received" in finding["message"]
    assert "faulthandler" in finding["fix"]


def test_a_train_run_fails_with_the_error_that_names_every_rank(fixtures):
    # Real Ray 2.60 Train V2: rank 1 was SIGKILLed. Rank 0's own traceback (a gloo error)
    # comes first in driver.log; the driver's WorkerGroupError names both ranks and holds why
    # rank 1 died. The run's failure is the latter, so the kill leads and the error folds in.
    base = fixtures / "train_v2_fr_rank_killed"
    _, report = inspect_json(
        str(experiment_dir(fixtures, "train_v2_fr_rank_killed")),
        "--logs",
        str(base / "driver.log"),
    )
    (trial,) = report["trials"]
    assert trial["status"] == "ERROR"
    (lead,) = report["findings"]
    assert lead["rule"] == "oom-killed-by-os" and lead["trial_id"] == trial["trial_id"]
    (folded,) = lead["related"]
    assert folded["rule"] == "trial-error" and "failed on ranks 0, 1" in folded["message"]


def test_a_worker_death_without_its_log_names_no_crash(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_worker_segfault")))
    assert "crashed" not in report["findings"][0]["message"]
    related = [r for f in report["findings"] for r in [f, *f["related"]]]
    (finding,) = [r for r in related if r["rule"] == "trial-error"]
    assert finding["message"].endswith("before finishing this task.")


def test_a_crash_of_another_process_is_not_attributed(fixtures, tmp_path):
    # The same log with the crash moved to a pid the trial's error does not name.
    base = fixtures / "tune_worker_segfault"
    pid = next(base.rglob("error.txt")).read_text().split("pid: ")[1].split()[0]
    log = tmp_path / "driver.log"
    log.write_text((base / "driver.log").read_text().replace(pid, "99999"))
    _, report = inspect_json(
        str(experiment_dir(fixtures, "tune_worker_segfault")), "--logs", str(log)
    )
    assert all(
        "crashed:" not in r["message"] for f in report["findings"] for r in [f, *f["related"]]
    )


def test_fires_on_a_failed_train_v2_run_given_its_driver_log(fixtures):
    base = fixtures / "train_v2_rank_failure"
    _, report = inspect_json(
        str(experiment_dir(fixtures, "train_v2_rank_failure")), "--logs", str(base / "driver.log")
    )
    (finding,) = findings_of(report, "trial-error")
    assert "ValueError: Found NaN in input batch on rank 1" in finding["message"]
    assert report["trials"][0]["status"] == "ERROR"


def test_near_miss_recovered_trial_has_error_txt_but_finished(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_recovered")))
    assert not findings_of(report, "trial-error")


def test_near_miss_healthy_sweep(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert not findings_of(report, "trial-error")


def test_near_miss_benign_background_traceback_in_a_healthy_v2_log(fixtures):
    base = fixtures / "train_v2_healthy"
    code, report = inspect_json(
        str(experiment_dir(fixtures, "train_v2_healthy")),
        "--logs",
        str(base / "driver.log"),
        "--logs",
        str(base / "session_logs"),
    )
    assert not findings_of(report, "trial-error")
    assert code == 0


def _recovered_log_lines(fixtures, *words: str) -> str:
    """Lines of the real Ray 2.60 driver log of a trial that errored once and then finished."""
    lines = (fixtures / "tune_recovered" / "driver.log").read_text().splitlines()
    return "".join(f"{line}\n" for line in lines if any(word in line for word in words))


def test_a_log_that_only_says_a_trial_errored(fixtures):
    """A driver log cut short (or pasted) after Tune's status line: no error text, but Tune
    said the trial errored. Exit 0 would call the run clean."""
    text = _recovered_log_lines(fixtures, "errored after 3 iterations")
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "trial-error")
    assert "Trial train_model_dc43a_00000 errored" in finding["message"]
    assert "error.txt" in finding["message"] and "ray-doctor inspect" in finding["fix"]


def test_near_miss_the_log_says_the_trial_completed_later(fixtures):
    text = _recovered_log_lines(fixtures, "errored after 3 iterations", "completed after")
    assert text.count("\n") == 2
    code, report = inspect_json("-", stdin=text)
    assert code == 0 and not report["findings"]


def test_near_miss_a_cause_in_the_log_speaks_alone():
    """Ray's memory monitor's kill notice beside Tune's line: the cause is the finding; the
    trial's bare 'errored' adds nothing (real Ray 2.x wordings)."""
    text = (
        "2023-06-01 10:00:00,000\tERROR tune_controller.py:1332 -- Trial task failed for trial "
        "train_fn_8c9e1_00000\n"
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
        "memory.\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert report["findings"][0]["rule"] == "oom-ray-memory-monitor"
    assert not any("the log says" in f["message"] for f in findings_of(report, "trial-error"))


def test_near_miss_a_warning_without_its_file_prefix():
    # Python prints "file.py:N: UserWarning: ..."; a log that lost the prefix still holds a
    # warning, not an error (PBT's num_to_keep warning, torch's TypedStorage one).
    text = (
        "UserWarning: TypedStorage is deprecated. It will be removed in the future and "
        "UntypedStorage will be the only storage class.\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert not report["findings"]
    assert code == 0


def test_near_miss_an_agent_port_clash_ray_lives_with():
    # Ray 1.13-2.20's dashboard agent: the metrics exporter cannot bind, the agent goes on.
    text = (
        "2024-01-01 10:00:00,000\tERROR metrics_agent.py:90 -- Failed to start prometheus stats "
        "exporter. Agent will stay alive but disable the stats.\n"
        "Traceback (most recent call last):\n"
        '  File "/x/ray/_private/metrics_agent.py", line 86, in __init__\n'
        "    self.view_manager.register_exporter(stats_exporter)\n"
        "OSError: [Errno 98] Address already in use\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert not report["findings"]
    assert code == 0


# The end of Ray 2.60's driver log for a trial whose function called sys.exit(3) (a real run).
SELF_EXIT_TEXT = """\
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: ImplicitFunc
\tactor_id: 6f327c40b857158c4a97396701000000
\tpid: 10621
\tnamespace: 9de91210-e255-4800-a524-afadca92f5f0
\tip: 192.0.2.2
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker \
exit detail: Worker exits unexpectedly. Worker exits with an exit code 3.
"""


def test_a_worker_that_exited_by_itself_is_not_called_killed():
    raylet = (
        "(raylet) A worker died or was killed while executing a task by an unexpected system "
        "error. To troubleshoot the problem, check the logs for the dead worker.\n"
    )
    _, report = inspect_json("-", stdin=raylet + SELF_EXIT_TEXT)
    assert not findings_of(report, "oom-killed-by-os"), "an exit code is no kill"
    (finding,) = findings_of(report, "trial-error")
    assert "exited by itself with code 3" in finding["message"]
    assert "argparse" in finding["fix"]


def test_a_class_trainable_without_save_checkpoint():
    # Ray 2.60's error.txt of a class Trainable Tune had to save (a real run; paths neutral).
    text = """\
Failure # 1 (occurred at 2026-11-26_09-03-37)
ray::Cls.save() (pid=10985, ip=192.0.2.2, actor_id=12769b57d8c693083265b04e01000000)
  File "/home/ray/anaconda3/lib/python3.11/site-packages/ray/tune/trainable/trainable.py", \
line 485, in save
    checkpoint_dict_or_path = self.save_checkpoint(checkpoint_dir)
  File "/home/ray/anaconda3/lib/python3.11/site-packages/ray/tune/trainable/trainable.py", \
line 869, in save_checkpoint
    raise NotImplementedError
NotImplementedError
"""
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "trial-error")
    assert "`Trainable.save_checkpoint`: the class does not define it" in finding["message"]
    assert "load_checkpoint(self, checkpoint_dir)" in finding["fix"]


def test_a_traceback_that_lost_its_indentation_is_still_one_failure():
    # As copied from a rendered page (pytorch/gloo#148): frames and code lines unindented,
    # `<module>` gone. It was an empty "unknown error" at the header, then the exception apart.
    text = (
        "Traceback (most recent call last):\n"
        'File "/home/simon/Desktop/dist_rl/dist_rl.py", line 13, in\n'
        'dist.init_process_group(rank=0,backend="gloo",init_method=\'file:///home/simon/Desktop/'
        "shared_folder/gloo_shared_file',world_size=2)\n"
        'File "/home/simon/anaconda3/lib/python3.6/site-packages/torch/distributed/'
        'distributed_c10d.py", line 283, in init_process_group\n'
        "_default_pg = ProcessGroupGloo(store, rank, world_size)\n"
        "RuntimeError: Wait timeout\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "trial-error")
    assert finding["message"].startswith("The run failed with RuntimeError: Wait timeout")
    assert [e["line"] for e in finding["evidence"]] == [1, 6]


def test_a_worker_traceback_another_process_printed_into_is_still_one_failure(fixtures):
    """The driver prints each process's lines in batches, so another worker's line can land
    inside a worker's traceback (a hand-edited copy of a real Train V2 driver log: the
    PlacementGroupCleaner's line moved up into rank 1's traceback). The traceback is read to
    its exception all the same, not cut into a frame with no error and a stray remainder."""
    lines = (fixtures / "train_v2_rank_failure" / "driver.log").read_text().splitlines(True)
    start = next(i for i, line in enumerate(lines) if "Error in training function" in line)
    worker = lines[start : start + 8]  # the message, the traceback, its blank line
    cleaner = next(line for line in lines if "PlacementGroupCleaner pid=" in line)
    text = "".join([*worker[:3], cleaner, *worker[3:]])
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "trial-error")
    assert "ValueError: Found NaN in input batch on rank 1" in finding["message"]
    assert "before_epoch" in finding["message"], "names the user frame"
