"""metric-nonfinite: a reported metric became NaN or infinite, or autograd's anomaly check fired."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, Experiment, Trial
from ray_doctor.rules._base import (
    Precedence,
    Rule,
    failure_evidence,
    stop_subject,
    subject_name,
    trial_subject,
)
from ray_doctor.rules._signature import (
    Signature,
    ended_by,
    search,
    search_events,
    signatures,
    wording,
)

ANOMALY = signatures(
    wording(
        "anomaly detection",
        r"Function '(\w+)' returned nan values in its (\d+)(?:st|nd|rd|th) output",
        "torch autograd anomaly mode (torch/csrc/autograd/engine.cpp)",
        "torch 1.0-2.13",
        "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.",
    ),
    wording(
        "NaN check",
        r"(?i)\b(?:loss|gradient|grad)s? (?:is|are|was|were|became|contains?) (?:nan|inf)",
        "training loops (torchvision references, timm, DETR: 'Loss is nan, stopping training'; "
        "neuralhydrology: 'Loss was NaN for 1 times in a row')",
        "any",
        "Loss is nan, stopping training",
    ),
    wording(
        "NaN parameter of a distribution",
        r"but found invalid values:?|The parameter \w+ has invalid values",
        "torch.distributions argument validation (torch/distributions/distribution.py)",
        "torch 1.5-2.13 ('The parameter ... has invalid values' before 1.8)",
        "ValueError: Expected parameter loc (Tensor of shape (64, 2)) of distribution "
        "Normal(loc: torch.Size([64, 2])) to satisfy the constraint Real(), but found invalid "
        "values:\ntensor([[nan, nan]])",
    ),
    wording(
        "NaN reached a sampler or a solver",
        r"invalid multinomial distribution \(encountering probability entry = infinity or NaN\)|"
        r"The algorithm failed to converge because the input matrix contained non-finite values",
        "torch: multinomial sampling (aten/src/ATen/native/cpu/MultinomialKernel.cpp) and the "
        "linalg solvers (aten/src/ATen/native/BatchLinearAlgebra.cpp)",
        "torch 1.x-2.13",
        "RuntimeError: invalid multinomial distribution (encountering probability entry = "
        "infinity or NaN)",
    ),
    wording(
        "searcher: objective returned NaN",
        r"objective function returned nan",
        "Optuna study (optuna/study/_optimize.py), through Ray Tune's OptunaSearch and FLAML",
        "Optuna 1.x-4.x",
        "WARNING optuna.py:516 -- Trial 8 failed, because the objective function returned nan.",
    ),
    wording(
        "metric not finite",
        r"Monitored metric \S+ = (?:nan|inf|-inf) is not finite|"
        r"Loss became infinite or NaN|contain Inf/NaN|gradients from `parameters` is non-finite",
        "Lightning EarlyStopping, detectron2, torch.nn.utils.clip_grad_norm_",
        "Lightning 1.x-2.x; detectron2; torch 1.13-2.13",
        "Monitored metric val_loss = nan is not finite. Previous best value was inf. Signaling "
        "Trainer to stop.",
    ),
    wording(
        "TensorBoard got NaN",
        r"NaN or Inf found in input tensor",
        "tensorboardX's check on every value it logs (tensorboardX/x2num.py), Ray Tune's "
        "TBXLoggerCallback and RLlib among its callers",
        "tensorboardX 1.x-2.x",
        "WARNING:root:NaN or Inf found in input tensor.",
    ),
    wording(
        "loss scale collapsed",
        r"overflow detected, setting loss scale to: 0\.|[Mm]inimum loss scale reached|"
        # fairseq's FloatingPointError goes on: "... Your loss is probably exploding."
        r"loss scale already at minimum|Your loss is probably exploding",
        "fp16 dynamic loss scalers (fairseq, apex, DeepSpeed)",
        "fairseq 0.x; apex; DeepSpeed 0.x",
        "| WARNING: overflow detected, setting loss scale to: 0.03125",
    ),
    wording(
        "loss logged as NaN",
        r"(?i)['\"]?\b(?:[a-z]+_)?(?:loss|cost)\b['\"]?\s*[=:|]?\s*nan\b",
        "training loggers (Marian, fairseq, Hugging Face Trainer's 'loss' / 'eval_loss'; the "
        "key-value table of "
        "OpenAI's logger.py, baselines to guided-diffusion: '| loss | nan |')",
        "any",
        "Ep. 1 : Up. 300 : Sen. 137,255 : Cost nan : Time 17.18s",
    ),
    # With `logging_nan_inf_filter` (on by default) the Trainer leaves a NaN or inf step loss
    # out of the window's sum; when every step of the window was, the sum stays at the 0 it
    # was reset to, and the row logs a loss of 0.0 beside the NaN gradient norm. A NaN
    # gradient norm with a finite loss is fp16's loss scaler skipping a step: not claimed.
    wording(
        "loss filtered to 0.0",
        r"""['"]loss['"]: 0\.0, ['"]grad_norm['"]: (?:nan|inf)\b""",
        "Hugging Face Trainer's logging_nan_inf_filter (transformers trainer.py, "
        "_inner_training_loop), logged by LLaMA-Factory, TRL and others",
        "transformers 4.38+ (grad_norm in the log)",
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 4.549912997495027e-06, 'epoch': 0.66}",
    ),
    # Infinity too, but not a best-so-far value, which starts at inf before any epoch.
    wording(
        "loss logged as inf",
        r"(?i)(?<!best )(?<!min )(?<!lowest )(?<!minimum )\bloss\b\s*[=:]\s*inf\b",
        "training loggers (RSL-RL's iteration table: 'Value function loss: inf')",
        "any",
        "               Value function loss: inf",
    ),
)
LR_KEYS = ("lr", "learning_rate", "learning-rate")
# torch.distributions says "found invalid values" for any broken constraint; it is a NaN when
# the values it prints are, or when the constraint is `real` (whose check rejects only NaN):
# `loc` of Normal, Laplace, Cauchy is one.
NONFINITE_VALUE = re.compile(r"\b(?:nan|inf)\b|constraint Real\(\)|parameter loc\b", re.IGNORECASE)


def _shows_nonfinite(label: str, text: str) -> bool:
    return label != "NaN parameter of a distribution" or bool(NONFINITE_VALUE.search(text))


class MetricNonfinite(Rule):
    """A metric went NaN or infinite: training diverged (or autograd's anomaly check stopped it).

    Symptom:
        result.json rows where a metric such as the loss is `NaN`, `Infinity` or `-Infinity`
        from some iteration on (the trial may still end TERMINATED), or a failure such as
        "Function 'MulBackward0' returned nan values in its 0th output" from
        `torch.autograd.set_detect_anomaly(True)`.
    Likely cause:
        Divergence: a learning rate too high for the model, no gradient clipping, fp16
        overflow without loss scaling, a log or division of zero, or bad input (NaN in the
        data).
    Evidence it uses:
        Every row of result.json (streamed; the first bad iteration per metric and the number
        of bad rows), the trial's config (the learning rate, when there is one), anomaly
        detection errors in error.txt or logs, and training loggers' NaN lines, among them
        the Hugging Face Trainer's `'loss': 0.0` beside a NaN gradient norm (its NaN filter
        left every step of the window out). A NaN gradient norm beside a finite loss is an
        fp16 step the loss scaler skipped, not claimed.
    Fix:
        Lower the learning rate or add warm-up, clip gradients
        (`torch.nn.utils.clip_grad_norm_`), use bf16 or a `GradScaler` with fp16, and check
        the data for NaN. Stop such trials early instead of spending the budget on them:
        a scheduler (ASHA) or a stopper on the metric.
    References:
        - https://pytorch.org/docs/stable/autograd.html#anomaly-detection
        - https://docs.ray.io/en/latest/tune/api/stoppers.html
    """

    id = "metric-nonfinite"
    title = "Metric became NaN or infinite"
    severity = Severity.WARNING
    specificity = Precedence.CODE_OR_DATA
    example = "fixtures/tune_nan_metrics"

    @classmethod
    def wordings(cls) -> tuple[Signature, ...]:
        return ANOMALY

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        fired = False
        for trial in experiment.trials:
            if trial.history and trial.history.nonfinite:
                fired = True
                yield self._from_history(experiment, trial)
        for trial, failure, subject in ended_by(experiment):
            hit = search(ANOMALY, failure)
            if hit and _shows_nonfinite(hit.signature.label, failure.text):
                fired = True
                yield self.finding(
                    experiment,
                    f"{subject_name(experiment, trial)} failed on a non-finite value "
                    f"({hit.evidence.excerpt}).",
                    self._fix(trial),
                    [hit.evidence, *failure_evidence(failure)],
                    trial=trial,
                    subject=subject,
                    severity=Severity.ERROR,
                )
        if not fired:
            hits = [
                h
                for h in search_events(ANOMALY, experiment.events)
                if _shows_nonfinite(h.signature.label, h.evidence.excerpt)
            ]
            if hits:
                yield self.finding(
                    experiment,
                    f"The run's log shows non-finite values ({hits[0].signature.label}: "
                    f"{hits[0].evidence.excerpt[:160]}).",
                    self._fix(None),
                    [h.evidence for h in hits[:5]],
                    subject=stop_subject(experiment),
                )

    def _from_history(self, experiment: Experiment, trial: Trial) -> Finding:
        history = trial.history
        assert history is not None
        metrics = ", ".join(
            f"{n.metric} ({n.value} from iteration {n.first_iteration})"
            for n in history.nonfinite[:4]
        )
        message = (
            f"{subject_name(experiment, trial)} reported non-finite values: {metrics}; "
            f"{history.nonfinite_rows} of {history.rows} rows are affected"
        )
        lr = _learning_rate(trial)
        if lr is not None:
            message += f". Its learning rate is {lr}"
            siblings = [
                t for t in experiment.trials if t is not trial and _learning_rate(t) is not None
            ]
            clean = [t for t in siblings if not (t.history and t.history.nonfinite)]
            if clean and all(_learning_rate(t) < lr for t in clean):
                message += ", higher than every trial that stayed finite"
        message += "."
        evidence = [
            Evidence(
                history.path,
                n.first_line,
                f"{n.metric} = {n.value} at training_iteration {n.first_iteration}",
            )
            for n in history.nonfinite[:4]
        ]
        return self.finding(
            experiment,
            message,
            self._fix(trial),
            evidence,
            trial=trial,
            subject=f"nonfinite:{trial_subject(experiment, trial)}",
        )

    @staticmethod
    def _fix(trial: Trial | None) -> str:
        return (
            "Lower the learning rate (or add warm-up), clip gradients "
            "(`torch.nn.utils.clip_grad_norm_`), use bf16 or fp16 with a `GradScaler`, and check "
            "the input for NaN; stop diverging trials early with a scheduler such as ASHA."
        )


def _learning_rate(trial: Trial) -> float | None:
    for key in LR_KEYS:
        value = trial.config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
