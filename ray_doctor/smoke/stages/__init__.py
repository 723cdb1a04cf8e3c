"""The smoke stages, one module each, and the registry the runner reads them from.

A stage module declares itself with `STAGE = Stage(...)` at module level: its name and title,
where it is listed, when the runner calls its `run` (`phase`), the Ray API pieces it uses, what
it asks the cluster for, and whether a plain `ray-doctor smoke` runs it. The registry finds
every public module of this package; adding a stage is adding a module. What the stages share
is in `_common`.

Each stage's `run` returns a `StageResult` (or several, or None when it reports by events
through `ctx.emit`); a stage never raises for what it tests. Blocking Ray calls (a Tune run, a
Train run) run in a thread with a bound, so one that hangs is reported as such instead of
hanging the smoke run. Modules import Ray only inside their functions: the CLI lists the
stages without it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

# When the runner calls a stage's `run` (in this order):
CONNECT = "connect"  # run(ctx) first; the others run only when it passes
BACKGROUND = "background"  # run(ctx) in a thread, alongside the other stages
PROBES = "probes"  # run(ctx, probes): the node probes (one task per node), gathered
LAST = "last"  # run(ctx) after every other stage has ended


def _never(api: Any) -> bool:
    return False


@dataclass(frozen=True)
class Stage:
    """A smoke stage as its module declares it."""

    name: str  # stable: `--stage`, the report, JUnit test cases
    title: str  # one line: what the stage checks
    position: int  # where it is listed and reported, lowest first
    run: Callable[..., Any] | None  # None: another stage's run reports it (`reported_by`)
    phase: str = BACKGROUND
    reports: tuple[str, ...] = ()  # other stages the same run reports
    reported_by: str | None = None
    api: frozenset[str] = frozenset()  # Ray API pieces it uses ("tune", "train"; _compat)
    request: Callable[[Any], list[dict[str, float]] | None] | None = None  # bundles it asks for
    default: bool = False  # in a plain `ray-doctor smoke`
    with_relaunch: bool = False  # in `ray-doctor smoke --from ...`
    before_probes: bool = False  # BACKGROUND: awaited before the node probes are gathered
    # BACKGROUND: does its run go through Tune in the driver on this Ray (`_compat.RayApi`)?
    # Tune's driver state is not thread-safe, so such runs go one after another.
    tune_driver: Callable[[Any], bool] = _never

    def wanted(self, selected: set[str] | tuple[str, ...]) -> bool:
        """Does a run of `selected` stages need this one to run?"""
        return self.name in selected or any(name in selected for name in self.reports)


@cache
def registry() -> dict[str, Stage]:
    """Every stage of this package, by name, in `position` order."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        stage = getattr(importlib.import_module(f"{__name__}.{info.name}"), "STAGE", None)
        if isinstance(stage, Stage):
            found.append(stage)
    return {stage.name: stage for stage in sorted(found, key=lambda s: s.position)}


def titles() -> dict[str, str]:
    return {name: stage.title for name, stage in registry().items()}


def default_stages(relaunch: bool = False) -> tuple[str, ...]:
    """The stages a plain `ray-doctor smoke` runs (or `--from ...` with `relaunch`)."""
    return tuple(
        name
        for name, stage in registry().items()
        if (stage.with_relaunch if relaunch else stage.default)
    )
