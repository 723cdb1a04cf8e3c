"""metric-nonfinite: NaN / Infinity in a real result.json, with the first bad iteration."""

import pytest
from conftest import experiment_dir, findings_of, inspect_json


def test_first_bad_iteration_and_learning_rate(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_nan_metrics")))
    assert code == 0, "a warning: the trials still finished"
    (finding,) = findings_of(report, "metric-nonfinite")
    assert finding["severity"] == "warning"
    assert "loss (Infinity from iteration 3)" in finding["message"]
    assert "higher than every trial that stayed finite" in finding["message"]
    (evidence,) = finding["evidence"]
    assert evidence["path"].endswith("result.json") and evidence["line"] == 3


def test_anomaly_detection_failure():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/ray/train.py", line 41, in train_fn\n'
        "    loss.backward()\n"
        "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "metric-nonfinite")
    assert finding["severity"] == "error"


def test_near_miss_nan_in_a_config_string_or_message(fixtures):
    _, report = inspect_json(
        str(experiment_dir(fixtures, "train_v2_rank_failure")),
        "--logs",
        str(fixtures / "train_v2_rank_failure" / "driver.log"),
    )
    # "Found NaN in input batch" is the user's own error, not a reported metric.
    assert not findings_of(report, "metric-nonfinite")


def test_near_miss_healthy(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert not findings_of(report, "metric-nonfinite")


@pytest.mark.parametrize(
    "text",
    [
        "               Value function loss: inf\n",  # RSL-RL's iteration table
        "WARNING:root:NaN or Inf found in input tensor.\n",  # tensorboardX, Tune's TBX logger
        "RuntimeError: Loss was NaN for 1 times in a row. Stopped training.\n",
    ],
)
def test_logged_and_raised_wordings(text):
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "metric-nonfinite")


@pytest.mark.parametrize(
    "text",
    ["Epoch 0: best loss: inf\n", "Previous best loss: inf, saving\n", "min loss = inf\n"],
)
def test_near_miss_a_best_so_far_value_that_starts_at_inf(text):
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "metric-nonfinite")


def test_a_key_value_table_logging_a_nan_loss():
    """OpenAI's logger.py prints `| key | value |` tables (baselines to guided-diffusion #50,
    as posted: every loss term nan while the fp16 loss scale keeps falling)."""
    text = (
        "-----------------------------\n"
        "| lg_loss_scale | -1.62e+04 |\n"
        "| loss          | nan       |\n"
        "| mse           | nan       |\n"
        "| step          | 1.53e+05  |\n"
        "-----------------------------\n"
        "Found NaN, decreased lg_loss_scale to -16199.354\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "metric-nonfinite")
    assert "| loss          | nan" in finding["message"]


def test_near_miss_a_table_whose_loss_is_finite():
    text = "| loss          | 0.0123    |\n| nan_count     | 0         |\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "metric-nonfinite")


def test_hugging_face_logs_a_nan_eval_loss():
    """The Trainer's log line (trl #1053: every label masked, an empty cross-entropy)."""
    text = "{'eval_loss': nan, 'eval_runtime': 143.8323, 'eval_samples_per_second': 17.576}\n"
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "metric-nonfinite")


def test_hugging_face_filters_nan_losses_to_zero():
    """With `logging_nan_inf_filter` (the default) the Trainer leaves NaN step losses out of
    the window's sum, so a window of nothing else logs `'loss': 0.0` beside the NaN gradient
    norm (LLaMA-Factory #5627, as posted)."""
    text = (
        "{'loss': 1.4596, 'grad_norm': nan, 'learning_rate': 4.552255167404752e-06, "
        "'epoch': 0.66}\n"
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 4.549912997495027e-06, "
        "'epoch': 0.66}\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "metric-nonfinite")
    assert "loss filtered to 0.0" in finding["message"]


def test_near_miss_a_nan_gradient_norm_beside_a_finite_loss():
    """fp16's loss scaler skips a step whose gradients overflowed: the Trainer logs a NaN
    gradient norm with the window's finite loss, and training goes on (qwen-vl #10's first
    row, as posted)."""
    text = (
        "{'loss': 1.0446, 'grad_norm': nan, 'learning_rate': 1.4925373134328357e-08, "
        "'epoch': 0.0}\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "metric-nonfinite")
