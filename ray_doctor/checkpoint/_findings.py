"""Turn what the checks found into findings, with the rule registry's titles, severities and fixes."""

from __future__ import annotations

from collections import defaultdict

from ray_doctor.checkpoint._model import CheckpointResult, FileResult, Problem, StateDict
from ray_doctor.checkpoint._torchfile import BUFFER_SUFFIXES
from ray_doctor.findings import Finding
from ray_doctor.model import Evidence

MAX_EVIDENCE = 8
SHOWN = 5


def _rule(rule_id: str):
    from ray_doctor.rules import REGISTRY

    return REGISTRY[rule_id]


def label(path: str, checkpoint: CheckpointResult | None) -> str:
    """A file's name as messages show it: relative to its checkpoint's parent dir."""
    if checkpoint is None:
        return path
    parent = checkpoint.path.rstrip("/").rsplit("/", 1)[0]
    return path[len(parent) + 1 :] if path.startswith(parent + "/") else path


def make_finding(
    rule_id: str, message: str, evidence: list[Evidence], checkpoint: CheckpointResult | None
) -> Finding:
    rule = _rule(rule_id)
    return rule.make_finding(
        message,
        evidence[:MAX_EVIDENCE],
        rule.verify_fix,
        experiment=checkpoint.experiment if checkpoint else None,
        trial_id=checkpoint.trial_id if checkpoint else None,
    )


def model_state_dicts(file: FileResult) -> list[StateDict]:
    """State dicts that hold model weights (not the per-parameter dicts inside an optimizer)."""
    inside = [f"{o.where}.state" if o.where else "state" for o in file.optimizers]
    return [
        sd
        for sd in file.state_dicts
        if not any(sd.where == p or sd.where.startswith(p + ".") for p in inside)
    ]


def _prefix(checkpoint: CheckpointResult, file: FileResult) -> list[Finding]:
    out = []
    for sd in model_state_dicts(file):
        if sd.keys and all(k.startswith("module.") for k in sd.keys):
            where = f" under `{sd.where}`" if sd.where else ""
            out.append(
                make_finding(
                    "state-dict-prefix",
                    f"{label(file.path, checkpoint)}: all {len(sd.keys)} keys of the state dict{where} start with "
                    f"`module.` (e.g. {sd.keys[0]}): it was saved from a DDP-wrapped model and "
                    "will not load into the bare model as is.",
                    [Evidence(file.path, None, ", ".join(sd.keys[:SHOWN]))],
                    checkpoint,
                )
            )
    return out


def _optimizer(checkpoint: CheckpointResult, file: FileResult) -> list[Finding]:
    models = model_state_dicts(file)
    if not file.optimizers or not models:
        return []
    model = max(models, key=lambda sd: len(sd.keys))
    params = [(k, model.shapes[k]) for k in model.keys if not k.endswith(BUFFER_SUFFIXES)]
    out = []
    for optimizer in file.optimizers:
        where = f"`{optimizer.where}`" if optimizer.where else "the optimizer state"
        if len(optimizer.param_ids) != len(params):
            message = (
                f"{label(file.path, checkpoint)}: {where} covers {len(optimizer.param_ids)} parameters but the model "
                f"state dict has {len(params)}."
            )
        else:
            wrong = [
                f"param {pid} has state of shape {list(optimizer.state_shapes[pid])}, "
                f"model parameter {name} is {list(shape)}"
                for pid, (name, shape) in zip(optimizer.param_ids, params, strict=True)
                if pid in optimizer.state_shapes and optimizer.state_shapes[pid] != shape
            ]
            if not wrong:
                continue
            message = f"{label(file.path, checkpoint)}: {where} does not fit the model: {'; '.join(wrong[:3])}."
        out.append(
            make_finding(
                "optimizer-mismatch", message, [Evidence(file.path, None, message)], checkpoint
            )
        )
    return out


def _problems(checkpoint: CheckpointResult) -> list[Finding]:
    """One finding per rule and file; several problems of a kind become its evidence lines."""
    grouped: dict[tuple[str, str], list[Problem]] = defaultdict(list)
    for problem in checkpoint.all_problems:
        grouped[(problem.rule, problem.evidence.path)].append(problem)
    out = []
    for (rule_id, path), problems in grouped.items():
        first = problems[0].message
        more = f" (and {len(problems) - 1} more problems of this kind)" if len(problems) > 1 else ""
        out.append(
            make_finding(
                rule_id,
                f"{label(path, checkpoint)}: {first}{more}",
                [p.evidence for p in problems],
                checkpoint,
            )
        )
    return out


def checkpoint_findings(checkpoint: CheckpointResult) -> list[Finding]:
    findings = _problems(checkpoint)
    for file in checkpoint.files:
        if not file.problems:
            findings += _prefix(checkpoint, file) + _optimizer(checkpoint, file)
    return findings


def compare(checkpoint: CheckpointResult, reference: CheckpointResult) -> list[Finding]:
    """Keys and shapes against a reference checkpoint (state-dict-mismatch before a restore)."""
    mine = {t.name: t.shape for t in checkpoint.tensors}
    theirs = {t.name: t.shape for t in reference.tensors}
    if not mine or not theirs:
        return []
    missing = sorted(set(theirs) - set(mine))
    unexpected = sorted(set(mine) - set(theirs))
    reshaped = sorted(k for k in set(mine) & set(theirs) if mine[k] != theirs[k])
    if not (missing or unexpected or reshaped):
        return []
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing ({', '.join(missing[:SHOWN])})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected ({', '.join(unexpected[:SHOWN])})")
    if reshaped:
        shown = ", ".join(f"{k} {list(theirs[k])} -> {list(mine[k])}" for k in reshaped[:SHOWN])
        parts.append(f"{len(reshaped)} reshaped ({shown})")
    message = (
        f"{label(checkpoint.path, checkpoint)} against {reference.path}: keys {'; '.join(parts)}. A restore that "
        "expects the reference's layout will fail in load_state_dict."
    )
    evidence = [Evidence(checkpoint.path, None, f"missing: {k}") for k in missing[:3]]
    evidence += [Evidence(checkpoint.path, None, f"unexpected: {k}") for k in unexpected[:3]]
    evidence += [Evidence(checkpoint.path, None, f"reshaped: {k}") for k in reshaped[:3]]
    return [make_finding("state-dict-mismatch", message, evidence, checkpoint)]
