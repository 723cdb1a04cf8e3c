"""Rule families: what JUnit reports one test case for (one per family, per trial).

A family groups the rules that check one aspect of a run, so a CI test list stays short and
stable while rules are added. A rule missing here is a family of its own.
"""

from __future__ import annotations

FAMILIES: dict[str, tuple[str, ...]] = {
    "failure": ("trial-error", "retries-exhausted", "recovered-after-failure", "trial-incomplete"),
    "progress": ("trial-stalled",),
    "numerics": ("metric-nonfinite", "checkpoint-nonfinite"),
    "memory": ("oom-ray-memory-monitor", "oom-cuda", "oom-killed-by-os"),
    "checkpoints": (
        "checkpoint-corrupt",
        "checkpoint-missing",
        "checkpoint-empty",
        "snapshot-dangling",
    ),
    "checkpoint-safety": ("checkpoint-unsafe",),
    "state-dict": ("state-dict-mismatch", "state-dict-prefix", "optimizer-mismatch"),
    "distributed": ("collective-timeout", "nccl-error", "port-conflict"),
    "devices": ("device-mismatch",),
    "storage": ("disk-full", "storage-unreachable"),
    "environment": ("missing-module",),
    "resources": ("resources-insufficient",),
    "search-space": ("config-correlated-failures",),
}
# Families whose rules compare trials with each other: they say nothing about one trial.
ACROSS_TRIALS = frozenset({"search-space"})
# Families that read a trial's reported results: not applicable to a trial that reported none.
NEED_RESULTS = frozenset({"progress", "numerics"})

_FAMILY_OF = {rule: family for family, rules in FAMILIES.items() for rule in rules}


def family_of(rule_id: str) -> str:
    return _FAMILY_OF.get(rule_id, rule_id)


def families_for(command: str) -> list[str]:
    """The families with a rule the command reports, in the table's order."""
    from ray_doctor.rules import RULES

    wanted = {family_of(rule.id) for rule in RULES if command in rule.commands}
    ordered = [family for family in FAMILIES if family in wanted]
    return ordered + sorted(wanted - set(ordered))
