"""checkpoint-missing: nothing to resume from, or records name a checkpoint that is gone."""

from __future__ import annotations

from collections.abc import Iterator

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, Experiment, Failure, Layout, Trial, TrialStatus
from ray_doctor.rules._base import (
    Precedence,
    Rule,
    resume_hint,
    sentence,
    stop_subject,
    subject_name,
)
from ray_doctor.rules._signature import Hit, ended_by, search, search_events, signatures

RESTORE_GONE = "restore: checkpoint deleted"
GONE = signatures(
    (
        "snapshot names a missing checkpoint",
        r"contains a reference to a checkpoint that does not exist anymore",
    ),
    # Not when Ray says why: a snapshot saved by another Ray version (checkpoint_manager.py,
    # Ray 2.4x-2.60) is no missing checkpoint.
    (
        "checkpoint manager init",
        r"CheckpointManagerInitializationError(?![^\n]*snapshot saved with (?:Ray version|an "
        r"unknown Ray version))",
    ),
    # Tune's Trainable.restore (ray/tune/trainable/trainable.py, Ray 2.7-2.60): the checkpoint
    # a trial is told to restore was deleted first, typically by `num_to_keep` while PBT was
    # about to copy it into another trial.
    (
        RESTORE_GONE,
        r"Could not recover from checkpoint as it does not exist on storage anymore\."
        r"(?: Got storage fs type `\w+` and path: (\S+))?",
    ),
    # Not in the dir Tune's `restore_from_object` unpacks a shipped checkpoint into
    # (`tempfile.mkdtemp("restore_from_object")`, Ray 0.8-1.x): a file missing there is one
    # Tune's own transfer left out (a Tune bug, ray #8581), not a checkpoint that is gone.
    # Lightning's checkpoint IO (lightning_fabric/plugins/io/torch_io.py, 1.9-2.x; "Checkpoint
    # at ... not found. Aborting training." before), which many trainers copy word for word.
    (
        "checkpoint file not found",
        r"Checkpoint file not found: \S|Checkpoint at \S+ not found\. Aborting training",
    ),
    # fvcore / detectron2's Checkpointer ("Checkpoint {} not found!") and mmcv / mmengine's
    # load_checkpoint, which says "is not a checkpoint file" only when the path is no file.
    (
        "checkpoint loader: no file",
        r"Checkpoint \S+ not found!|(?:IOError|OSError): \S.* is not a checkpoint file",
    ),
    # Tune's searchers on resume (tune/search/searcher.py restore_from_dir, Ray 1.x-2.x;
    # basic_variant.py / search_generator.py "Unable to find checkpoint in"): no searcher-state
    # file in the experiment dir.
    ("searcher state missing", r"(?:Searcher u|RuntimeError: U)nable to find checkpoint in \S"),
    # torch's loaders of a model file by path: torch.jit.load (torch/jit/_serialization.py) and
    # the C++ file adapter (caffe2/serialize/file_adapter.cc) when fopen says ENOENT.
    (
        "model file missing",
        r"The provided filename \S+ does not exist|"
        r"open file failed because of errno 2 on fopen",
    ),
    # TensorFlow's Saver.restore (tensorflow/python/training/saver.py, 1.x-2.x) when no
    # checkpoint exists under the prefix it was given.
    ("TensorFlow saver: no checkpoint", r"The passed +save_path is not a valid checkpoint"),
    # super-gradients' checkpoint loader (training/utils/checkpoint_utils.py, 3.x:
    # `read_ckpt_state_dict` when `os.path.exists` says no).
    (
        "checkpoint loader: path missing",
        r"FileNotFoundError: Incorrect Checkpoint path:\s+\S",
    ),
    # Loaders that name the dir they were given: accelerate's `Accelerator.load_state`
    # (accelerate/accelerator.py) and LLaMA-Efficient-Tuning / ChatGLM-Efficient-Tuning's LoRA
    # loader. Not DeepSpeed's "Unable to find latest file at": a warning many scripts meet on
    # every first run, as they try to load before they know there is anything to load.
    (
        "checkpoint dir missing",
        r"Tried to find \S.* but folder does not exist|"
        r"Provided path \(\S*\) does not contain a LoRA weight",
    ),
    # darts' TorchForecastingModel.load_from_checkpoint (darts/models/forecasting/
    # torch_forecasting_model.py): no checkpoint file by that prefix in the model's dir.
    ("checkpoint by prefix missing", r"There is no file matching prefix \S+ in \S"),
    # Ray's TorchCheckpoint without its model file (ray/train/torch/torch_checkpoint.py,
    # Ray 2.x) and Tune asked for a trial's checkpoints when it has none
    # (tune/analysis/experiment_analysis.py, Ray 1.0-2.60).
    (
        "Ray checkpoint holds no model",
        r"`model\.pt` not found within this checkpoint|No checkpoints have been found for trial",
    ),
    (
        "checkpoint path missing",
        r"(?:FileNotFoundError|No such file or directory).{0,600}"
        r"(?<!restore_from_object/)checkpoint_",
    ),
    # A weights file by its extension: .pth, .ckpt and .safetensors hold models (and Ray 0.x-1.x
    # Tune / RLlib checkpoints had a .tune_metadata beside them); .pt and .bin are as often
    # datasets (PyG's processed/data.pt) and are left to the words above. Up to 600 characters
    # of path: a Tune trial dir's name alone holds its config (130 characters and more).
    (
        "weights file missing",
        r"(?:FileNotFoundError|No such file or directory)(?![^\n]*restore_from_object/)"
        r"[^\n]{0,600}\.(?:pth|ckpt|safetensors|tune_metadata)['\"]",
    ),
)


# Ray's own records name a checkpoint that is gone; the other rows are a path the code loads.
RECORDS = {"snapshot names a missing checkpoint", "checkpoint manager init", RESTORE_GONE}
PATH_FIX = (
    "Check the path where the failing process runs: a relative path resolves against its "
    "working dir (Tune starts a trainable in its trial dir), and a file on the driver's disk "
    "is not on the other nodes. Load from an absolute path on storage every node reads (the "
    "run's `storage_path`, or `ray.train.get_checkpoint()`), and create the file first if it "
    "comes from an earlier step."
)


class CheckpointMissing(Rule):
    """A failure had no checkpoint to resume from, or the records name a checkpoint that is gone.

    Symptom:
        A trial with retries (`max_failures > 0`) failed and every retry started over from
        iteration 1; or a Train V2 `checkpoint_manager_snapshot.json` (or a trial's last
        reported `checkpoint_dir_name`) names a checkpoint dir that is not on storage, and a
        resume fails with "The run snapshot contains a reference to a checkpoint that does not
        exist anymore"; or a Tune trial told to restore a checkpoint fails with "Could not
        recover from checkpoint as it does not exist on storage anymore" (with PBT / PB2, a
        checkpoint of another trial, deleted by `num_to_keep` before the exploit copied it);
        or the code that loads a checkpoint finds no file at its path
        (`FileNotFoundError` on a `.pth` / `.ckpt` / `.safetensors` or `checkpoint_*` path,
        Lightning's "Checkpoint file not found", fvcore's "Checkpoint ... not found!", mmcv's
        "... is not a checkpoint file").
    Likely cause:
        The training function never reports a checkpoint (`tune.report(..., checkpoint=...)`)
        or does not load one (`tune.get_checkpoint()` / `ray.train.get_checkpoint()`), so a
        retry cannot resume. Dangling records come from checkpoint dirs deleted by hand or by
        a cleanup job, a sync that never finished, or storage that is not shared between nodes.
        A path that is not there is often relative (Tune starts a trainable in its trial dir)
        or on one node's disk only.
    Evidence it uses:
        Trial status, `max_failures`, the checkpoint dirs on storage, the last
        `checkpoint_dir_name` in result.json, the Train V2 snapshot's `checkpoint_results` and
        `latest_checkpoint_result`, and the resume error text.
    Fix:
        Report checkpoints regularly and restore from `get_checkpoint()` at the start of the
        training function. For a dangling Train V2 snapshot: put the missing dir back, or start
        a new run with a new `RunConfig(name=...)`; never delete checkpoint dirs by hand, let
        `CheckpointConfig(num_to_keep=...)` do it.
    References:
        - https://docs.ray.io/en/latest/tune/tutorials/tune-trial-checkpoints.html
        - https://docs.ray.io/en/latest/train/user-guides/checkpoints.html
    """

    specificity = Precedence.CODE_OR_DATA
    id = "checkpoint-missing"
    title = "No checkpoint to resume from"
    severity = Severity.ERROR
    example = "fixtures/tune_no_checkpoint"

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        for trial in experiment.trials:
            missing = [c for c in trial.checkpoints if not c.exists]
            if missing:
                yield self._dangling(experiment, trial, missing)
            elif self._retried_from_scratch(trial):
                yield self._nothing_to_resume(experiment, trial)
        # A trial's own error (a training function loading its checkpoint) or the run's.
        found_in_failures = False
        for trial, failure, subject in ended_by(experiment):
            hit = None if _sync_walk_race(failure) else search(GONE, failure)
            if hit:
                found_in_failures = True
                yield self._load_failed(experiment, hit, trial, subject)
        # Tune logs some of these as a line of its own before the traceback it raises.
        if not found_in_failures and self._stopped(experiment):
            hits = search_events(GONE, experiment.events)
            if hits:
                yield self._load_failed(experiment, hits[0], None, stop_subject(experiment))

    @staticmethod
    def _stopped(experiment: Experiment) -> bool:
        return bool(experiment.failures) or any(t.status.unfinished for t in experiment.trials)

    def _load_failed(
        self, experiment: Experiment, hit: Hit, trial: Trial | None, subject: str
    ) -> Finding:
        fix = self._dangling_fix(experiment) if hit.signature.label in RECORDS else PATH_FIX
        message = (
            f"{subject_name(experiment, trial)} could not load a checkpoint: {hit.evidence.excerpt}"
        )
        owner = _other_trial_owning(experiment, trial, hit)
        if owner is not None:
            message = sentence(message) + (
                f" The checkpoint is trial {owner.trial_id}'s, not this trial's: a scheduler "
                "that exploits (PBT, PB2) copies a better trial's checkpoint into another, and "
                "this one was gone by then"
            )
            kept = [c.name for c in owner.checkpoints if c.exists]
            if kept:
                message += (
                    f"; trial {owner.trial_id} keeps {', '.join(kept[-2:])}: Tune deletes older "
                    "checkpoints when `CheckpointConfig(num_to_keep=...)` is set"
                )
            message += "."
            fix = (
                "With PBT or PB2, keep checkpoints long enough for an exploit to copy them: "
                "raise `CheckpointConfig(num_to_keep=...)` (or leave it unset), and checkpoint "
                "at least as often as `perturbation_interval`; then "
                f"{resume_hint(experiment)}."
            )
        return self.finding(
            experiment,
            message,
            fix,
            [hit.evidence],
            trial=trial,
            subject=subject,
        )

    @staticmethod
    def _retried_from_scratch(trial: Trial) -> bool:
        return (
            trial.status == TrialStatus.ERROR
            and bool(trial.max_failures)
            and trial.failure_count > 1
            and not trial.checkpoints
        )

    def _dangling(self, experiment: Experiment, trial: Trial, missing) -> Finding:
        names = ", ".join(c.name for c in missing[:3])
        source = (
            "checkpoint_manager_snapshot.json"
            if experiment.layout == Layout.TRAIN_V2
            else "the last checkpoint_dir_name in result.json"
        )
        message = (
            f"{subject_name(experiment, trial)}: {source} names {names}, which is not on storage; "
            "a resume from this run fails or silently starts from an older state."
        )
        evidence = [Evidence(c.path, None, f"{c.name}: not found on storage") for c in missing[:3]]
        return self.finding(
            experiment,
            message,
            self._dangling_fix(experiment),
            evidence,
            trial=trial,
            subject=f"checkpoint:{experiment.path}:{trial.trial_id}",
        )

    @staticmethod
    def _dangling_fix(experiment: Experiment) -> str:
        if experiment.layout == Layout.TRAIN_V2:
            return (
                "Put the missing checkpoint dir back, or start a new run with a new "
                "`RunConfig(name=...)` (optionally passing a good checkpoint as "
                "`resume_from_checkpoint`). Let `CheckpointConfig(num_to_keep=...)` delete "
                "checkpoints; never remove them by hand."
            )
        return (
            "Put the missing checkpoint dir back if a copy exists (a sync may not have finished, "
            "or storage is not shared between nodes); otherwise the trial can only resume from an "
            "older checkpoint. Let `CheckpointConfig(num_to_keep=...)` delete checkpoints."
        )

    def _nothing_to_resume(self, experiment: Experiment, trial: Trial) -> Finding:
        restarts = trial.history.restart_count if trial.history else 0
        message = (
            f"{subject_name(experiment, trial)} failed {trial.failure_count} times with "
            f"max_failures={trial.max_failures}, and never saved a checkpoint: every retry "
            "started over from the first iteration"
        )
        message += f" ({restarts} restarts in result.json)." if restarts else "."
        evidence = [f.source for f in trial.failures if f.source][:3]
        if trial.path:
            evidence.append(Evidence(trial.path, None, "no checkpoint_* dir in the trial dir"))
        fix = (
            "Report a checkpoint regularly (`tune.report(metrics, checkpoint=Checkpoint."
            "from_directory(tmp))`) and load it at the start of the training function "
            "(`tune.get_checkpoint()`), so retries resume instead of starting over; then "
            f"{resume_hint(experiment)}."
        )
        return self.finding(
            experiment,
            message,
            fix,
            evidence,
            trial=trial,
            subject=f"checkpoint:{experiment.path}:{trial.trial_id}",
            severity=Severity.WARNING,
        )


# Tune's sync lists a trial dir, then stats each file; a checkpoint the trial deleted in
# between (Ray's temp `checkpoint_-00001`, or one past `num_to_keep`) raises FileNotFoundError
# in Ray's own walk, not in code that loads a checkpoint (ray #27168; Ray 1.x-2.0
# tune/utils/file_transfer.py, which later ignores such files).
SYNC_WALK = ("_get_recursive_files_and_stats",)


def _sync_walk_race(failure: Failure) -> bool:
    innermost = failure.frames[-1] if failure.frames else None
    return (
        innermost is not None
        and innermost.function in SYNC_WALK
        and "ray/tune/" in innermost.file.replace("\\", "/")
    )


def _other_trial_owning(experiment: Experiment, trial: Trial | None, hit: Hit) -> Trial | None:
    """The trial whose dir holds the checkpoint a restore did not find, when that is not the
    trial that restored it (Tune's "does not exist on storage anymore" names the path)."""
    if hit.signature.label != RESTORE_GONE or trial is None or not hit.match.group(1):
        return None
    parts = hit.match.group(1).rstrip("/").split("/")
    if len(parts) < 2:
        return None
    owner_dir = parts[-2]
    for other in experiment.trials:
        if other is not trial and other.name == owner_dir:
            return other
    return None
