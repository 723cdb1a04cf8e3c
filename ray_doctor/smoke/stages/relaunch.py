"""The `relaunch` stage: the failed trial's own config re-run with its trainable."""

from __future__ import annotations

import os
import time
from typing import Any

from ray_doctor.smoke import _probes
from ray_doctor.smoke.stages import LAST, Stage
from ray_doctor.smoke.stages._common import (
    Context,
    bounded,
    collected_values,
    new_collector,
    ray_api,
)


def storage_join(storage: str, name: str) -> str:
    """`storage/name`, keeping a URI's query (s3://bucket/path?endpoint_override=...)."""
    if "://" not in storage:
        return os.path.join(storage, name)
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(storage)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + name))


def load_entrypoint(spec: str):
    """`module:attr` (imported with the working dir on sys.path, as `python -m` would) or
    `path/to/file.py:attr`. User code outside site-packages is shipped to the workers by
    value, so they need not have it on their path."""
    import importlib
    import importlib.util
    import sys

    target, _, attr = spec.rpartition(":")
    if target.endswith(".py") or os.sep in target:
        path = os.path.abspath(target)
        name = os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(target)
    value = module
    for part in attr.split("."):
        value = getattr(value, part)
    if "site-packages" not in (getattr(module, "__file__", "") or ""):
        from ray import cloudpickle as ray_serializer  # safe: only serializes user code out

        ray_serializer.register_pickle_by_value(module)  # safe: pickling out, never loading
    return value


def relaunch_run(ctx: Context) -> dict[str, Any]:
    """Run the user's trainable with the failed trial's config and resources; the parent
    reads the experiment it writes with inspect's own scan and rules."""
    from ray import tune

    plan = ctx.options.relaunch
    assert plan is not None
    facts: dict[str, Any] = {"entrypoint": plan.entrypoint, "iterations_asked": plan.iterations}
    try:
        trainable = load_entrypoint(plan.entrypoint)
    except Exception as exc:
        facts["import_error"] = _probes.error_text(exc)
        return facts
    RunConfig, FailureConfig = ray_api(ctx).tune_configs()
    collector = new_collector()
    name = f"{ctx.run_name}-relaunch"
    tuner = tune.Tuner(
        tune.with_resources(
            _probes.measured(trainable, collector),
            tune.PlacementGroupFactory(plan.resources, strategy=plan.strategy),
        ),
        param_space=plan.config,
        tune_config=tune.TuneConfig(num_samples=1),
        run_config=RunConfig(
            name=name,
            storage_path=ctx.storage,
            stop={"training_iteration": plan.iterations},
            failure_config=FailureConfig(max_failures=0),
            verbose=1,
        ),
    )
    budget = ctx.budget(ctx.options.timeout_s)
    started = time.monotonic()
    finished, results, error = bounded(tuner.fit, budget)
    facts.update(
        seconds=time.monotonic() - started,
        finished=finished,
        experiment_path=storage_join(ctx.storage, name),
        peaks=(collected_values(collector) or {}).get("relaunch_peaks"),
    )
    if error is not None:
        facts["run_error"] = _probes.error_text(error)
    if finished and results is not None and len(results):
        result = results[0]
        facts["errored"] = result.error is not None
        facts["error"] = _probes.error_text(result.error) if result.error is not None else None
        facts["iterations"] = (result.metrics or {}).get("training_iteration")
    return facts


def run(ctx: Context) -> None:
    """The re-run's facts go to the parent, which reads its experiment and gives the verdict."""
    ctx.emit("relaunch", facts=relaunch_run(ctx))


def _resources(options) -> list[dict[str, float]] | None:
    return [dict(b) for b in options.relaunch.resources] if options.relaunch else None


STAGE = Stage(
    "relaunch",
    "the failed trial's own config, re-run with its trainable",
    position=5,
    run=run,
    phase=LAST,
    api=frozenset({"tune"}),
    request=_resources,
    with_relaunch=True,
)
