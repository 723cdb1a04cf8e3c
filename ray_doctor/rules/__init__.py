"""The rule registry and the engine that runs it over a scan.

`RULES` is the single table of stable rule ids (the public contract). The engine runs every
rule on every experiment, folds findings that describe the same failure under the most specific
one, then runs the cross-trial rules that read those findings, and sorts by severity. It never
prints.
"""

from __future__ import annotations

from collections.abc import Iterable

from ray_doctor.findings import Finding, Related, Severity
from ray_doctor.model import Layout, ScanResult
from ray_doctor.rules._base import Rule, RuleDoc
from ray_doctor.rules._forked import findings_by_rule
from ray_doctor.rules.checkpoint_corrupt import CheckpointCorrupt
from ray_doctor.rules.checkpoint_empty import CheckpointEmpty
from ray_doctor.rules.checkpoint_missing import CheckpointMissing
from ray_doctor.rules.checkpoint_nonfinite import CheckpointNonfinite
from ray_doctor.rules.checkpoint_roundtrip import CheckpointRoundtrip
from ray_doctor.rules.checkpoint_unsafe import CheckpointUnsafe
from ray_doctor.rules.cluster_unreachable import ClusterUnreachable
from ray_doctor.rules.collective_desync import CollectiveDesync
from ray_doctor.rules.collective_failed import CollectiveFailed
from ray_doctor.rules.collective_timeout import CollectiveTimeout
from ray_doctor.rules.config_correlated_failures import ConfigCorrelatedFailures
from ray_doctor.rules.device_mismatch import DeviceMismatch
from ray_doctor.rules.device_unavailable import DeviceUnavailable
from ray_doctor.rules.disk_full import DiskFull
from ray_doctor.rules.failure_changed import FailureChanged
from ray_doctor.rules.failure_not_reproduced import FailureNotReproduced
from ray_doctor.rules.failure_reproduced import FailureReproduced
from ray_doctor.rules.file_truncated import FileTruncated
from ray_doctor.rules.memory_headroom_low import MemoryHeadroomLow
from ray_doctor.rules.metric_nonfinite import MetricNonfinite
from ray_doctor.rules.missing_module import MissingModule
from ray_doctor.rules.nccl_error import NcclError
from ray_doctor.rules.oom import OomCuda, OomKilledByOs, OomRayMemoryMonitor
from ray_doctor.rules.optimizer_mismatch import OptimizerMismatch
from ray_doctor.rules.port_conflict import PortConflict
from ray_doctor.rules.recovered_after_failure import RecoveredAfterFailure
from ray_doctor.rules.resources_insufficient import ResourcesInsufficient
from ray_doctor.rules.retries_exhausted import RetriesExhausted
from ray_doctor.rules.shm_too_small import ShmTooSmall
from ray_doctor.rules.snapshot_dangling import SnapshotDangling
from ray_doctor.rules.state_dict_mismatch import StateDictMismatch
from ray_doctor.rules.state_dict_prefix import StateDictPrefix
from ray_doctor.rules.storage_unreachable import StorageUnreachable
from ray_doctor.rules.trial_error import TrialError
from ray_doctor.rules.trial_incomplete import TrialIncomplete
from ray_doctor.rules.trial_stalled import TrialStalled

RULES: tuple[type[Rule], ...] = (
    OomRayMemoryMonitor,
    OomCuda,
    OomKilledByOs,
    TrialIncomplete,
    TrialError,
    RetriesExhausted,
    RecoveredAfterFailure,
    CheckpointCorrupt,
    CheckpointMissing,
    StateDictMismatch,
    CollectiveDesync,
    CollectiveTimeout,
    NcclError,
    PortConflict,
    DeviceMismatch,
    MetricNonfinite,
    TrialStalled,
    DiskFull,
    ShmTooSmall,
    FileTruncated,
    StorageUnreachable,
    MissingModule,
    ResourcesInsufficient,
    ConfigCorrelatedFailures,
    # verify-checkpoint's own ids (checkpoint-corrupt and state-dict-mismatch serve both).
    CheckpointUnsafe,
    CheckpointNonfinite,
    StateDictPrefix,
    CheckpointEmpty,
    OptimizerMismatch,
    SnapshotDangling,
    # smoke's own ids (resources-insufficient, collective-timeout, nccl-error, port-conflict
    # and storage-unreachable serve it too).
    ClusterUnreachable,
    DeviceUnavailable,
    MemoryHeadroomLow,
    CollectiveFailed,
    CheckpointRoundtrip,
    FailureReproduced,
    FailureChanged,
    FailureNotReproduced,
)
INSPECT_RULES = tuple(rule for rule in RULES if "inspect" in rule.commands)
# While `--watch` follows a running experiment, unfinished trials are what it is watching, not
# a sign the driver stopped: trial-incomplete judges only stopped experiments.
LIVE_RULES = tuple(rule for rule in INSPECT_RULES if rule.id != "trial-incomplete")
REGISTRY: dict[str, type[Rule]] = {rule.id: rule for rule in RULES}
assert len(REGISTRY) == len(RULES), "two rules share an id"


def fold(findings: Iterable[Finding], one_story: str | None = None) -> list[Finding]:
    """One failure, one headline: per subject, the most specific finding keeps the others.

    `one_story`: a text input (a pasted log, an error excerpt) tells one failure, whatever
    number of tracebacks and kill notices it holds; every finding about it shares that subject,
    so the cause leads and the symptoms it produced fold under it."""
    kept: list[Finding] = []
    leaders: dict[str, Finding] = {}
    for finding in sorted(findings, key=lambda f: -f.specificity):
        if finding.subject is None:
            kept.append(finding)
            continue
        subject = one_story or finding.subject
        leader = leaders.get(subject)
        if leader is None:
            leaders[subject] = finding
            kept.append(finding)
        else:
            leader.related.append(Related(finding.rule, finding.title, finding.message))
            if finding.severity.rank > leader.severity.rank:
                leader.severity = finding.severity  # the headline is as serious as what it holds
    return kept


def run_rules(result: ScanResult, rules: Iterable[type[Rule]] = INSPECT_RULES) -> list[Finding]:
    instances = [rule() for rule in rules]
    findings: list[Finding] = []
    for experiment in result.experiments:
        story = f"text:{experiment.path}" if experiment.layout == Layout.LOG else None
        own = fold((f for found in findings_by_rule(instances, experiment) for f in found), story)
        for rule in instances:
            if getattr(rule, "needs_findings", False):
                own += list(rule.check_findings(experiment, own))
        findings += own
    order = {rule.id: i for i, rule in enumerate(RULES)}
    return sorted(
        findings,
        key=lambda f: (
            -f.severity.rank,
            f.experiment or "",
            -f.specificity,  # cause before symptom
            order.get(f.rule, 99),
            f.trial_id or "",
        ),
    )


__all__ = [
    "INSPECT_RULES",
    "LIVE_RULES",
    "REGISTRY",
    "RULES",
    "Finding",
    "Rule",
    "RuleDoc",
    "Severity",
    "run_rules",
]
