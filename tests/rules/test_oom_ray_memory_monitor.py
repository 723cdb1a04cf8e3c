"""oom-ray-memory-monitor on a real Ray 2.60 memory-monitor kill (trials left RUNNING)."""

import re
from pathlib import Path

from conftest import experiment_dir, findings_of, inspect_json

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "cases"


def test_driver_log_explains_the_running_trials(fixtures):
    base = fixtures / "tune_oom_memory_monitor"
    code, report = inspect_json(
        str(experiment_dir(fixtures, "tune_oom_memory_monitor")), "--logs", str(base / "driver.log")
    )
    assert code == 1
    (finding,) = findings_of(report, "oom-ray-memory-monitor")
    assert (
        report["findings"][0] is finding
        or report["findings"][0]["rule"] == "oom-ray-memory-monitor"
    )
    assert "used of" in finding["message"] and "GB" in finding["message"]
    assert "left unfinished" in finding["message"]
    # The stop it explains is not reported again as a separate headline.
    assert {r["rule"] for r in finding["related"]} >= {"trial-incomplete"}
    assert not findings_of(report, "trial-incomplete")
    assert any(
        "were killed due to the node running low on memory" in e["excerpt"]
        for e in finding["evidence"]
    )


def test_session_logs_alone_are_enough(fixtures):
    base = fixtures / "tune_oom_memory_monitor"
    code, report = inspect_json(
        str(experiment_dir(fixtures, "tune_oom_memory_monitor")),
        "--logs",
        str(base / "session_logs"),
    )
    assert code == 1
    (finding,) = findings_of(report, "oom-ray-memory-monitor")
    paths = {e["path"].rsplit("/", 1)[-1] for e in finding["evidence"]}
    assert paths & {"raylet.out", "gcs_server.out"}
    # The killed worker's pid (raylet.out) is matched to the trial that last reported it.
    raylet = (base / "session_logs" / "raylet.out").read_text()
    killed = int(re.search(r"pid=(\d+), actual memory used", raylet).group(1))
    (victim,) = [t for t in report["trials"] if t["last_result"].get("pid") == killed]
    assert finding["trial_id"] == victim["trial_id"]
    assert [r["rule"] for r in finding["related"]] == ["trial-incomplete"]


def test_old_wording_in_a_plain_log():
    text = (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        "Memory on the node (IP: 10.0.62.231, ID: e5d9) where the task (task ID: 43, name=allocate_memory, "
        "pid=11362, memory used=1.25GB) was running was 27.71GB / 28.80GB (0.962273), which exceeds the "
        "memory usage threshold of 0.95.\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "oom-ray-memory-monitor")
    assert "27.71GB used of 28.80GB" in finding["message"]


def test_near_miss_cuda_oom_is_not_rays_monitor():
    text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free.\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "oom-ray-memory-monitor")
    assert findings_of(report, "oom-cuda")


def test_near_miss_healthy_sweep(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert not findings_of(report, "oom-ray-memory-monitor")


def test_train_v2_kill_names_the_rank_that_held_the_memory(fixtures):
    # Real Ray 2.60 run: rank 1 grew to ~2 GB; the monitor killed the whole worker group and
    # its notice lists the controller's helpers first. The table says whose memory it was.
    base = fixtures / "train_v2_oom_rank"
    code, report = inspect_json(
        str(base / "ray_results" / "train_v2_oom_rank"),
        "--logs",
        str(base / "driver.log"),
    )
    assert code == 1
    finding = report["findings"][0]
    assert finding["rule"] == "oom-ray-memory-monitor"
    # The driver's WorkerGroupError ended the run: the run failed, and the kill is its cause.
    assert report["trials"][0]["status"] == "ERROR"
    assert finding["trial_id"] == "train_v2_oom_rank"
    assert "held by world rank 1 (pid 32239" in finding["message"]
    assert "killed with it: PreemptionWatcher.__init__" in finding["message"]
    assert "was running PreemptionWatcher" not in finding["message"]


def test_public_kill_notice_names_its_largest_memory_user():
    # A kill notice as posted publicly (tests/corpus): the "Top 10 memory users" table's
    # largest row is the process named, not the first one the notice lists.
    case = CORPUS / "skypilot" / "2668-spot-controller-oom-after-5-days.txt"
    text = case.read_text().split("\n---\n", 1)[1]
    _, report = inspect_json("-", stdin=text)
    assert "held by pid 18410" in report["findings"][0]["message"]
    assert "26.84 GB" in report["findings"][0]["message"]


def test_the_kill_at_the_end_of_a_long_session_is_found(fixtures, tmp_path):
    """A long session: thousands of real lines of other runs' raylet.out and gcs_server.out
    (enough to fill the log reader's event cap many times over) before the memory monitor's
    kill, logged at the end as the run died."""
    base = fixtures / "tune_oom_memory_monitor"
    logs = tmp_path / "session_logs"
    logs.mkdir()
    chatter_lines = {}
    for kind, copies in (("raylet.out", 40), ("gcs_server.out", 60)):
        chatter = b"".join(
            p.read_bytes()
            for p in sorted(fixtures.glob(f"*/session_logs/{kind}"))
            if p.parent.parent != base
        )
        assert chatter.endswith(b"\n")
        (logs / kind).write_bytes(chatter * copies + (base / "session_logs" / kind).read_bytes())
        chatter_lines[kind] = chatter.count(b"\n") * copies
    for other in (base / "session_logs").iterdir():
        if not (logs / other.name).exists():
            (logs / other.name).write_bytes(other.read_bytes())

    code, report = inspect_json(
        str(experiment_dir(fixtures, "tune_oom_memory_monitor")), "--logs", str(logs)
    )
    assert code == 1
    (finding,) = findings_of(report, "oom-ray-memory-monitor")
    original = (base / "session_logs" / "raylet.out").read_text().splitlines()
    kill = next(i for i, line in enumerate(original, start=1) if "Killing 1 worker(s)" in line)
    lines = {(e["path"].rsplit("/", 1)[-1], e["line"]) for e in finding["evidence"]}
    assert ("raylet.out", chatter_lines["raylet.out"] + kill) in lines
    # The kernel's OOM killer is not named as the cause of what Ray's monitor did.
    assert not findings_of(report, "oom-killed-by-os")


def test_the_node_table_in_the_session_logs_names_the_hog(fixtures, tmp_path):
    """The real session's raylet.out, hand-edited so the "Top 10 memory users" table (its own
    log lines, kept apart from the kill notice) says the driver held the most: the table, not
    the killed worker's own figure, names whose memory it was."""
    source = fixtures / "tune_oom_memory_monitor" / "session_logs"
    logs = tmp_path / "session_logs"
    logs.mkdir()
    for item in source.iterdir():
        (logs / item.name).write_bytes(item.read_bytes())
    raylet = (source / "raylet.out").read_text()
    assert "\n20291\t2.51\tray::ImplicitFunc.train\n" in raylet
    assert "\n20078\t0.12\t" in raylet
    edited = raylet.replace("\n20078\t0.12\t", "\n20078\t3.12\t")
    (logs / "raylet.out").write_text(edited)
    _, report = inspect_json(str(logs))
    (finding,) = findings_of(report, "oom-ray-memory-monitor")
    assert "held by pid 20078" in finding["message"] and "3.12 GB" in finding["message"]
    assert "killed with it: ImplicitFunc" in finding["message"]


def test_near_miss_ray_0x_heap_warning_at_80_percent():
    # Ray 0.7-1.0's memory_monitor.py logs the raise's words as a warning at 80 % of the limit.
    text = (
        "2020-05-01 10:00:00,000\tWARNING memory_monitor.py:145 -- Heap memory usage for "
        "ray_PPO_123 is 3.3 / 4.0 GiB limit\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "oom-ray-memory-monitor")
