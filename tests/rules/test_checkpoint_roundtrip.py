"""checkpoint-roundtrip (smoke): a restored checkpoint that differs from what was saved.

The probe's own writer and reader run for real on a dir; one byte of the payload is then
flipped, as storage that corrupts or mixes up files would.
"""

from ray_doctor.smoke import SmokeOptions, _probes
from ray_doctor.smoke.stages._common import Context
from ray_doctor.smoke.stages.checkpoint import checkpoint_result

RUN = {"seconds": 3.0, "finished": True, "out_of_time": False, "budget": 60, "trial_error": None}


def _check(tmp_path, corrupt: bool):
    saved = {"ok": True, "report_seconds": 0.1, **_probes._write_checkpoint(str(tmp_path))}
    if corrupt:
        payload = tmp_path / "payload.bin"
        data = bytearray(payload.read_bytes())
        data[1000] ^= 0xFF
        payload.write_bytes(bytes(data))
    restored = _probes._read_checkpoint(str(tmp_path))
    ctx = Context(SmokeOptions(), deadline=0, storage="s3://bucket/results")
    values = {"checkpoint_save": saved, "checkpoint_restore": restored}
    return checkpoint_result(ctx, values, RUN)


def test_a_flipped_byte_is_caught(tmp_path):
    result = _check(tmp_path, corrupt=True)
    (finding,) = result.findings
    assert finding.rule == "checkpoint-roundtrip"
    assert "payload.bin sha256" in finding.message and "s3://bucket/results" in finding.message


def test_near_miss_an_intact_checkpoint(tmp_path):
    result = _check(tmp_path, corrupt=False)
    assert result.status.value == "pass" and "every byte matches" in result.message


def test_near_miss_a_restore_cut_off_by_the_deadline(tmp_path):
    """A restore task still running when --timeout's budget ran out (a busy machine) is a
    stage that could not finish, not a checkpoint that came back wrong (seen under load: it was
    reported as checkpoint-roundtrip, exit 1)."""
    import ray

    saved = {"ok": True, "report_seconds": 0.1, **_probes._write_checkpoint(str(tmp_path))}
    timeout = ray.exceptions.GetTimeoutError("Get timed out: some object(s) not ready.")
    restored = {"ok": False, "error": _probes.error_text(timeout), "timed_out": True}
    ctx = Context(SmokeOptions(), deadline=0, storage="s3://bucket/results")
    values = {"checkpoint_save": saved, "checkpoint_restore": restored}
    result = checkpoint_result(ctx, values, RUN)
    assert result.status.value == "error" and not result.findings
    assert "raise --timeout" in result.message


def test_near_miss_a_trial_cut_off_by_the_deadline():
    """The smoke trial's own error is Ray's GetTimeoutError while --timeout ran out (a stage
    squeezed on a busy machine): out of time, not a failed check (seen in CI under load)."""
    from ray_doctor.smoke.stages._common import trial_failed

    run = {
        **RUN,
        "out_of_time": True,
        "trial_error": "ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.",
    }
    result = trial_failed("device", run, "device-unavailable")
    assert result.status.value == "error" and not result.findings
    assert "raise --timeout" in result.message
