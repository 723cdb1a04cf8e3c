"""Which rank caused a collective hang or crash: an analysis over the model, no I/O.

Each process group numbers its collectives (`collective_seq_id`); every rank must call the
same collective, with the same shapes and dtypes, at each number. So, per group:

- a *desync*: at one number, ranks called different collectives or shapes;
- a *lag*: some ranks' buffers end before number N while others reached it, so N is where
  those waited for them (unless the others' entry says N completed: then the dumps were
  only taken at different moments);
- and when a rank died first (a torchelastic error file, torchrun's report, Ray's word that a
  worker was killed), that rank.

Partial evidence (dumps from some ranks only) still gives the best answer it allows, and says
what is missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ray_doctor.model import CollectiveCall, CollectiveEvidence, Evidence, RankDump, RankExit


@dataclass
class Desync:
    """Ranks disagreeing at one sequence number: what each group of ranks called."""

    seq: int
    calls: list[tuple[list[int], CollectiveCall]]  # most common first

    @property
    def suspects(self) -> list[int]:
        if len(self.calls) < 2:
            return []
        top, runner_up = len(self.calls[0][0]), len(self.calls[1][0])
        if top == runner_up:  # no majority to call right: every side is a suspect
            return sorted(r for ranks, _ in self.calls for r in ranks)
        return sorted(r for ranks, _ in self.calls[1:] for r in ranks)


@dataclass
class Attribution:
    """The answer: where it stopped, who did not arrive, who disagreed, who died first."""

    group: str | None = None
    call: CollectiveCall | None = None  # collective #N the waiting ranks were in
    waiting: list[int] = field(default_factory=list)  # ranks that reached #N
    absent: list[int] = field(default_factory=list)  # ranks whose dump ends before #N
    no_dump: list[int] = field(default_factory=list)  # ranks of the group without a dump
    desync: Desync | None = None
    first_exit: RankExit | None = None
    last_calls: dict[int, CollectiveCall] = field(default_factory=dict)
    last_lines: dict[int, Evidence] = field(default_factory=dict)
    dumps: dict[int, RankDump] = field(default_factory=dict)

    @property
    def suspects(self) -> list[int]:
        ranks: list[int] = []
        if self.first_exit is not None and self.first_exit.rank is not None:
            ranks.append(self.first_exit.rank)
        ranks += self.absent
        if self.desync is not None:
            ranks += self.desync.suspects
        if not ranks:
            ranks += self.no_dump
        return list(dict.fromkeys(ranks))

    @property
    def found(self) -> bool:
        return bool(self.absent or self.desync or self.first_exit)


def _one_per_rank(dumps: list[RankDump]) -> dict[int, RankDump]:
    """A rank's JSON and pickle copies hold the same buffer: keep the one that goes furthest."""
    by_rank: dict[int, RankDump] = {}
    for dump in dumps:
        if dump.rank is None:
            continue
        kept = by_rank.get(dump.rank)
        if kept is None or _last_seq(dump) > _last_seq(kept):
            by_rank[dump.rank] = dump
    return by_rank


def _last_seq(dump: RankDump) -> int:
    return dump.calls[-1].seq if dump.calls else 0


def _groups(dumps: dict[int, RankDump]) -> dict[str, dict[int, dict[int, CollectiveCall]]]:
    """group -> rank -> seq -> call."""
    out: dict[str, dict[int, dict[int, CollectiveCall]]] = {}
    for rank, dump in dumps.items():
        for call in dump.calls:
            out.setdefault(call.group, {}).setdefault(rank, {})[call.seq] = call
    return out


def _members(group: str, calls: dict[int, dict[int, CollectiveCall]], dumps: dict[int, RankDump]):
    """The ranks that belong to a group: its pg_config entry, else (the default group) every
    rank any dump's config names, else the ranks that dumped it."""
    ranks: set[int] = set(calls)
    for dump in dumps.values():
        if group in dump.group_ranks:
            ranks |= set(dump.group_ranks[group])
    if len(ranks) == len(calls):
        descs = {c.group_desc for per_rank in calls.values() for c in per_rank.values()}
        if group == "0" or "default_pg" in descs:
            for dump in dumps.values():
                for listed in dump.group_ranks.values():
                    ranks |= set(listed)
    return sorted(ranks)


def _first_desync(per_rank: dict[int, dict[int, CollectiveCall]]) -> Desync | None:
    """The first sequence number at which ranks called different things. Each rank is
    compared with the one that holds the most entries (one dict lookup per entry); the
    sides are worked out only at the first number that differs."""
    if len(per_rank) < 2:
        return None
    reference = max(per_rank.values(), key=len)
    first: int | None = None
    for calls in per_rank.values():
        for seq, call in calls.items():
            if first is not None and seq >= first:
                continue
            ref = reference.get(seq)
            if ref is not None and (
                ref.sizes != call.sizes or ref.op != call.op or ref.dtypes != call.dtypes
            ):
                first = seq
    if first is None:
        return None
    sides: dict[tuple[str, str, str], tuple[list[int], CollectiveCall]] = {}
    for rank, calls in per_rank.items():
        if first in calls:
            sides.setdefault(calls[first].signature, ([], calls[first]))[0].append(rank)
    ordered = sorted(sides.values(), key=lambda side: (-len(side[0]), side[0]))
    return Desync(first, [(sorted(ranks), call) for ranks, call in ordered])


def _lag(per_rank: dict[int, dict[int, CollectiveCall]]):
    """(call #N, waiting ranks, absent ranks) when some ranks' buffers stop before others'."""
    last = {rank: max(calls) for rank, calls in per_rank.items() if calls}
    if len(last) < 2:
        return None
    low, high = min(last.values()), max(last.values())
    if low == high:
        return None
    seq = low + 1
    waiting = sorted(r for r, s in last.items() if s >= seq)
    absent = sorted(r for r, s in last.items() if s < seq)
    call = next((per_rank[r][seq] for r in waiting if seq in per_rank[r]), None)
    if call is None:
        call = per_rank[waiting[0]][min(s for s in per_rank[waiting[0]] if s >= seq)]
    if call.state == "completed":
        return None  # #N completed, so every rank joined it: the dumps are from other moments
    return call, waiting, absent


# A rank's error that only says a peer went away or never answered: a victim's, not a cause.
PEER_SYMPTOM = re.compile(
    r"Connection (?:closed|reset) by peer|Timed out waiting|Watchdog caught|timed out|"
    r"DistBackendError|NCCL communicator was aborted"
)


def _first_exit(exits: list[RankExit]) -> RankExit | None:
    """torchrun's root cause; else the earliest, a rank's own error before a peer symptom
    (error files carry whole seconds: two ranks often share one)."""
    if not exits:
        return None
    reported = [e for e in exits if e.root_cause]
    if reported:
        return reported[0]
    order = {id(e): i for i, e in enumerate(exits)}
    return min(
        exits,
        key=lambda e: (
            e.time is None,
            e.time or 0.0,
            bool(PEER_SYMPTOM.search(e.detail)),
            order[id(e)],
        ),
    )


def attribute(evidence: CollectiveEvidence) -> Attribution:
    dumps = _one_per_rank(evidence.dumps)
    answer = Attribution(
        first_exit=_first_exit(evidence.exits),
        last_lines=dict(evidence.last_lines),
        dumps=dumps,
    )
    answer.last_calls = {r: d.calls[-1] for r, d in dumps.items() if d.calls}
    groups = _groups(dumps)
    # The group with a problem leads; the default group ("0") first among equals.
    for group in sorted(groups, key=lambda g: (g != "0", g)):
        per_rank = groups[group]
        desync = _first_desync(per_rank)
        lag = _lag(per_rank)
        if desync is None and lag is None:
            continue
        answer.group = group
        answer.desync = desync
        if lag is not None:
            answer.call, answer.waiting, answer.absent = lag
        elif desync is not None:
            answer.call = desync.calls[0][1]
            answer.waiting = sorted(desync.calls[0][0])
        answer.no_dump = [r for r in _members(group, per_rank, dumps) if r not in per_rank]
        return answer
    if dumps:
        # No lag, no desync: the stop is the collective the dumps end in.
        group = "0" if "0" in groups else next(iter(sorted(groups)), None)
        if group is not None:
            per_rank = groups[group]
            answer.group = group
            last = max(max(calls) for calls in per_rank.values())
            answer.waiting = sorted(r for r, calls in per_rank.items() if last in calls)
            answer.call = per_rank[answer.waiting[0]][last]
            answer.no_dump = [r for r in _members(group, per_rank, dumps) if r not in per_rank]
    return answer
