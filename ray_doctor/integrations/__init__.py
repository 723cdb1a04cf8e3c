"""ray-doctor inside Ray programs and against live clusters.

- `ray_doctor.integrations.tune.DoctorCallback`: a Tune callback (sweeps, Train V1).
- `ray_doctor.integrations.train.DoctorCallback`: a Train V2 `UserCallback` that also keeps each
  rank's exception on the run's storage (`ray-doctor-errors.jsonl`).
- `ray_doctor.integrations.live`: `ray-doctor inspect --address`, a live cluster or Ray Job.

These modules talk to Ray, but import it only when a callback class or a live inspection is
first used: the CLI's `--help` and an offline `inspect` never load Ray.
"""
