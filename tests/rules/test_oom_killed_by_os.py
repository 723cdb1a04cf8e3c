"""oom-killed-by-os: a worker SIGKILLed without Ray's memory-monitor message."""

from conftest import experiment_dir, findings_of, inspect_json

DMESG = (
    "[1201.442190] Out of memory: Killed process 27627 (ray::ImplicitFu) total-vm:9871234kB, "
    "anon-rss:8123456kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:17000kB oom_score_adj:0\n"
)


def test_sigkilled_worker_is_called_likely_not_certain(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_sigkill")))
    assert code == 1
    (finding,) = findings_of(report, "oom-killed-by-os")
    assert "most likely cause is the kernel's OOM killer" in finding["message"]
    assert "ray stop --force" in finding["message"], "says what else looks the same"
    assert [r["rule"] for r in finding["related"]] == ["trial-error"]


def test_kernel_log_confirms_it(fixtures, tmp_path):
    dmesg = tmp_path / "dmesg.txt"
    dmesg.write_text(DMESG)
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_sigkill")), "--logs", str(dmesg))
    (finding,) = findings_of(report, "oom-killed-by-os")
    assert "the kernel log says so" in finding["message"]


def test_dmesg_alone():
    _, report = inspect_json("-", stdin=DMESG)
    (finding,) = findings_of(report, "oom-killed-by-os")
    assert finding["evidence"][0]["line"] == 1


def test_near_miss_raylet_cleanup_sigkill_lines(fixtures):
    # raylet.out of a healthy shutdown says "sending SIGKILL to pgid=..." for every worker.
    base = fixtures / "tune_sigkill"
    _, report = inspect_json(str(base / "session_logs" / "raylet.out"))
    assert not findings_of(report, "oom-killed-by-os")


def test_near_miss_ray_monitor_owns_the_kill(fixtures):
    base = fixtures / "tune_oom_memory_monitor"
    _, report = inspect_json(
        str(experiment_dir(fixtures, "tune_oom_memory_monitor")),
        "--logs",
        str(base / "session_logs"),
    )
    assert not findings_of(report, "oom-killed-by-os")


def test_the_kernel_line_names_the_process_and_its_memory():
    line = (
        "Out of memory: Killed process 3341 (python) total-vm:48123456kB, "
        "anon-rss:31234567kB, file-rss:0kB, shmem-rss:0kB\n"
    )
    _, report = inspect_json("-", stdin=line)
    (finding,) = findings_of(report, "oom-killed-by-os")
    assert "killed pid 3341 (python, 29.79 GB resident)" in finding["message"]


def test_torchrun_report_names_the_local_rank():
    line = (
        "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
        "local_rank: 0 (pid: 62498) of binary: /usr/bin/python\n"
    )
    _, report = inspect_json("-", stdin=line)
    (finding,) = findings_of(report, "oom-killed-by-os")
    assert "local rank 0 (pid 62498)" in finding["message"]


def test_shell_job_reports_of_a_sigkill_even_behind_a_padded_progress_bar():
    """zsh's and bash's job reports (Ginex #3: a run in an 8 GB memory cgroup). A progress
    bar padded to the terminal's width is joined to the next line when a paste is unwrapped,
    so the report is found inside a line, not only at its start."""
    bar = "Step 1: Superbatch Sample" + " " * 113 + "\n"
    for report_line in (
        "[1]    55263 killed     sudo PYTHONPATH=/opt/site-packages cgexec -g   -",
        "zsh: killed     python train.py",
        "[1]+  Killed                  python train.py",
    ):
        _, report = inspect_json("-", stdin=bar + bar + report_line + "\n")
        assert findings_of(report, "oom-killed-by-os"), report_line
    for near_miss in ("[1]  + 55263 done       python train.py", "Killed 3 stale sessions"):
        _, report = inspect_json("-", stdin=near_miss + "\n")
        assert not findings_of(report, "oom-killed-by-os"), near_miss


def test_the_kernels_victim_line_and_xargs_report_without_the_out_of_memory_line():
    # A platform that forwards only part of dmesg (EasyRec #60 on PAI).
    text = (
        "xargs: /worker/venv/bin/python: terminated by signal 9\n"
        "total-vm:30193768kB, anon-rss:19770320kB, file-rss:0kB, shmem-rss:0kB\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert report["findings"][0]["rule"] == "oom-killed-by-os"


def test_bashs_killed_on_a_chinese_locale():
    _, report = inspect_json("-", stdin="Writing metrics: /logdir/metrics.jsonl\n已杀死\n")
    assert report["findings"][0]["rule"] == "oom-killed-by-os"


def test_near_miss_an_ide_stop_after_the_user_interrupted():
    # PyCharm's stop button: SIGKILL after a KeyboardInterrupt, no memory witness.
    text = (
        "CondaError: KeyboardInterrupt\n\n"
        "Process finished with exit code 137 (interrupted by signal 9: SIGKILL)\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "oom-killed-by-os")
    # The same exit with the kernel's word for it stays memory.
    _, report = inspect_json("-", stdin=text + DMESG)
    assert findings_of(report, "oom-killed-by-os")


def test_a_kill_report_glued_to_mmcvs_progress_bar():
    """mmdetection #5263: a zh_CN shell's '已杀死' at the end of mmcv's bar."""
    text = "[>>>>>>>>>> ] 1022/5000, 1.5 task/s, elapsed: 673s, ETA: 2621s已杀死\n"
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "oom-killed-by-os")
