"""collective-desync: which rank a collective hang or crash came from, and where."""

from __future__ import annotations

from collections.abc import Iterator

from ray_doctor.collectives import Attribution, attribute
from ray_doctor.findings import Finding, Severity
from ray_doctor.model import CollectiveCall, Evidence, Experiment, Layout
from ray_doctor.rules._base import Precedence, Rule, stop_subject
from ray_doctor.rules._signature import ended_by

MAX_LINE = 160


class CollectiveDesync(Rule):
    """A rank never reached a collective, called a different one, or died: the culprit rank.

    Symptom:
        A collective timed out or failed (gloo's "Timed out waiting …", NCCL's watchdog,
        "Connection closed by peer") and the rank that reports it is the victim: it waited
        for a rank that never arrived. PyTorch Flight Recorder dumps, torchelastic error
        files or torchrun's "Root Cause (first observed failure)" report are at hand.
    Likely cause:
        The ranks stopped calling the same collectives in the same order: one skipped a
        collective (a branch on the rank, `ray.train.report` or a metric all-reduce on some
        ranks only, uneven data so one rank ran out of batches), called it with other shapes
        or dtypes (a desync), or died (an exception, a SIGKILL from the OOM killer or a
        preemption) while the others waited.
    Evidence it uses:
        Flight Recorder dumps of any subset of ranks, JSON or pickle (the pickle is read by a
        symbolic machine, never unpickled; a pickle that would import or call anything is
        reported, not loaded): per process group, the sequence number each rank reached and
        the op, shapes and dtypes it called there. torchelastic error files, torchrun's
        ChildFailedError report and Ray's word that a worker died say which rank ended
        first and how. Train V2's `train/*.log` (each record names its `world_rank`) and the
        driver's `(RayTrainWorker pid=…)` lines, mapped to ranks by the controller's worker
        list, give each rank's last log line. Missing pieces are named.
    Fix:
        Look at the named rank at the named collective: make every rank call the same
        collectives with the same shapes (no collective under `if rank == …`; report from
        every rank; `DistributedSampler(drop_last=True)` for even batches). When a rank died,
        its own error (or the OOM killer) is the cause. To get dumps next time, set
        `TORCH_FR_BUFFER_SIZE=2000` (and `TORCH_NCCL_DUMP_ON_TIMEOUT=1`,
        `TORCH_FR_DUMP_TEMP_FILE=/path/rank_`) in the workers' environment, e.g. through
        `ray.init(runtime_env={"env_vars": {...}})`.
    References:
        - https://pytorch.org/docs/stable/torch_nccl_flight_recorder.html
        - https://pytorch.org/docs/stable/elastic/errors.html
        - https://docs.ray.io/en/latest/train/user-guides/debugging.html
    """

    id = "collective-desync"
    title = "Which rank broke the collective"
    severity = Severity.ERROR
    commands = ("inspect", "smoke")
    # Names the culprit rank and how it died: it leads the collective timeout it caused, the
    # rank's own error and the kill notice of the rank (whose text it includes).
    specificity = Precedence.ENVIRONMENT + 1
    example = "fixtures/train_v2_fr_skipped_collective"

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        if not experiment.collectives:
            return
        answer = attribute(experiment.collectives)
        failed = any(True for _ in ended_by(experiment))
        if not (answer.found or (answer.no_dump and failed)):
            return
        message = describe(answer, logs_given=bool(experiment.logs))
        subject = next((s for _, _, s in ended_by(experiment)), None) or stop_subject(experiment)
        trial = next((t for t, _, _ in ended_by(experiment) if t is not None), None)
        if trial is None and experiment.layout == Layout.TRAIN_V2 and len(experiment.trials) == 1:
            trial = experiment.trials[0]  # dumps given beside a Train V2 run are that run's
        yield self.finding(
            experiment,
            message,
            fix_for(answer),
            evidence_of(answer),
            trial=trial,
            subject=subject,
        )


def _ranks(ranks: list[int]) -> str:
    """ "rank 3", "ranks 0, 1", "ranks 0-36, 38-63": runs of three or more as ranges."""
    label = "rank" if len(ranks) == 1 else "ranks"
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    parts = [f"{run[0]}-{run[-1]}" if len(run) >= 3 else ", ".join(map(str, run)) for run in runs]
    return f"{label} {', '.join(parts)}"


def _call(call: CollectiveCall) -> str:
    return f"collective {call.describe}"


def describe(answer: Attribution, logs_given: bool | None = None) -> str:
    """The headline: the culprit rank(s), the collective, and what evidence is missing
    (`logs_given` None: logs are not part of the evidence, as in smoke)."""
    parts: list[str] = []
    if answer.absent and answer.call is not None:
        verb = "was" if len(answer.waiting) == 1 else "were"
        parts.append(
            f"{_ranks(answer.absent).capitalize()} never reached {_call(answer.call)} while "
            f"{_ranks(answer.waiting)} {verb} waiting in it."
        )
    if answer.desync is not None:
        sides = "; ".join(
            f"{_ranks(ranks)} called {call.op} with sizes {call.shown_sizes}"
            + (f", {call.shown_dtypes}" if call.shown_dtypes else "")
            for ranks, call in answer.desync.calls
        )
        group = answer.desync.calls[0][1]
        parts.append(
            f"Desync at collective #{answer.desync.seq} on process group {group.group}: {sides}."
        )
    exit_ = answer.first_exit
    if exit_ is not None:
        who = f"Rank {exit_.rank}" if exit_.rank is not None else "A rank"
        how = {
            "signal": f"it was killed by {exit_.detail}",
            "exception": f"it raised {exit_.detail}",
        }.get(exit_.how, f"its process ended without a Python exception ({exit_.detail})")
        parts.append(_sentence(f"{who} died first: {how}"))
    if not answer.absent and not answer.desync and answer.call is not None and answer.waiting:
        verb = "was" if len(answer.waiting) == 1 else "were"
        parts.append(f"{_ranks(answer.waiting).capitalize()} {verb} in {_call(answer.call)}.")
    for rank in answer.suspects:
        parts.append(_suspect(answer, rank))
    parts.append(_missing(answer, logs_given))
    return " ".join(p for p in parts if p)


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?", "!", "…")) else text + "."


def _suspect(answer: Attribution, rank: int) -> str:
    bits = []
    call = answer.last_calls.get(rank)
    if call is not None:
        bits.append(f"last collective {call.describe}")
    line = answer.last_lines.get(rank)
    if line is not None:
        text = line.excerpt if len(line.excerpt) <= MAX_LINE else line.excerpt[: MAX_LINE - 1] + "…"
        bits.append(f'last log line "{text}"')
    return f"Rank {rank}: {'; '.join(bits)}." if bits else ""


def _missing(answer: Attribution, logs_given: bool | None) -> str:
    missing = []
    if answer.no_dump:
        missing.append(f"no Flight Recorder dump from {_ranks(answer.no_dump)}")
    if not answer.dumps:
        missing.append("no Flight Recorder dumps")
    if logs_given is None:
        pass
    elif not answer.last_lines:
        missing.append("no per-rank log lines" + ("" if logs_given else " (no --logs given)"))
    elif any(r not in answer.last_lines for r in answer.suspects):
        quiet = [r for r in answer.suspects if r not in answer.last_lines]
        missing.append(f"no log line from {_ranks(quiet)}")
    return f"Missing: {'; '.join(missing)}." if missing else ""


def fix_for(answer: Attribution) -> str:
    died = answer.first_exit
    if died is not None and died.how == "exception":
        return (
            f"Fix rank {died.rank}'s own error ({died.detail}); the other ranks only failed "
            "waiting for it in the collective."
        )
    if died is not None:
        return (
            f"Find out what ended rank {died.rank}'s process (the OOM killer, a preemption, a "
            "native crash: see raylet.out, the worker's .err and the node's kernel log); the "
            "other ranks only failed waiting for it."
        )
    if answer.desync is not None:
        return (
            "Make every rank call the same collective with the same shapes and dtypes at this "
            "point: look for a shape that depends on the rank's data (pad or gather sizes "
            "first) or a collective under a rank-dependent branch."
        )
    return (
        "Make every rank run the same collectives: look at what the named rank did instead "
        "(a branch on the rank, a report or metric all-reduce on some ranks only, uneven "
        "batches: `DistributedSampler(drop_last=True)`), or at its own error."
    )


def evidence_of(answer: Attribution) -> list[Evidence]:
    evidence: list[Evidence] = []
    for rank in sorted(set(answer.waiting + answer.suspects)):
        dump = answer.dumps.get(rank)
        call = answer.last_calls.get(rank)
        if dump is not None and call is not None:
            excerpt = f"rank {rank} ({dump.format}): last collective {call.describe}, {call.state}"
            evidence.append(Evidence(dump.path, None, excerpt))
    if answer.first_exit is not None:
        evidence.append(answer.first_exit.source)
    for rank in answer.suspects:
        line = answer.last_lines.get(rank)
        if line is not None:
            evidence.append(line)
    return evidence
