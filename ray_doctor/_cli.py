"""The command line: a thin typer layer over scan → rules → report.

Imports stay light: nothing here (or in what `inspect` reaches) imports ray or torch.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer

from ray_doctor import __version__
from ray_doctor.report._registry import FORMATS
from ray_doctor.storage import shown_target

app = typer.Typer(
    name="ray-doctor",
    help="Diagnose failed Ray Tune and Ray Train experiments from what they leave on storage.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# One member per registered formatter (ray_doctor/report/_registry.py), so every command that
# takes --format offers every format.
OutputFormat = Enum("OutputFormat", {name: name for name in FORMATS}, type=str)


class FailOn(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"
    never = "never"


class ColorMode(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


# The report options every command takes, declared once.
FormatOption = Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")]
OutputOption = Annotated[
    Optional[Path],  # noqa: UP045 - typer needs Optional on older Pythons
    typer.Option("--output", "-o", help="Write the report to this file instead of stdout."),
]
FailOnOption = Annotated[
    FailOn, typer.Option("--fail-on", help="Exit 1 when a finding is at least this severe.")
]
ColorOption = Annotated[ColorMode, typer.Option("--color", help="Colour output.")]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ray-doctor {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Diagnose failed Ray Tune and Ray Train experiments from what they leave on storage."""


def _use_color(mode: ColorMode, stream) -> bool:
    if mode == ColorMode.always:
        return True
    if mode == ColorMode.never or os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class _ProgressBar:
    """A progress bar on stderr, shown only once a scan has taken more than a moment."""

    DELAY_S = 0.5
    REFRESH_S = 0.1

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.monotonic()
        self.drawn = 0.0
        self._progress = None
        self._tasks: dict[str, int] = {}

    def __call__(self, name: str, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.started < self.DELAY_S:
            return
        if self._progress is None:
            from rich.console import Console
            from rich.progress import Progress

            # Drawn from the scan's own calls, not by rich's refresh thread: the scan forks
            # reader processes, and a thread holding stderr's lock at a fork leaves the child
            # to deadlock when it flushes stderr on exit.
            self._progress = Progress(
                console=Console(stderr=True), transient=True, auto_refresh=False
            )
            self._progress.start()
        if name not in self._tasks:
            self._tasks[name] = self._progress.add_task(f"reading {name}", total=total)
        self._progress.update(self._tasks[name], completed=done, total=total)
        if now - self.drawn >= self.REFRESH_S or done >= total:
            self._progress.refresh()
            self.drawn = now

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def _formatter(
    output_format: OutputFormat, output: Path | None, color: ColorMode, max_rows: int | None
):
    """The formatter for --format, or exit 2 with one line when it cannot be used as asked.

    Every command calls this before it does its work, so bad output options fail fast.
    """
    from ray_doctor.report import FormatOptions, formatter_class
    from ray_doctor.report._interface import FormatUnavailable

    cls = formatter_class(output_format.value)
    to_terminal = output is None and sys.stdout.isatty()
    if cls.wants_file and to_terminal:
        _refuse(
            f"--format {output_format.value} writes a file for a browser, not for a terminal: "
            f"add --output report.{output_format.value} (or redirect stdout to a file)"
        )
    if output is not None:
        _check_writable(output)
    width = 100
    if to_terminal:
        width = os.get_terminal_size(sys.stdout.fileno()).columns
    options = FormatOptions(
        color=_use_color(color, sys.stdout if output is None else None),
        width=width,
        max_rows=max_rows,
        indent=to_terminal,
        workspace=os.environ.get("GITHUB_WORKSPACE") or os.getcwd(),
        step_summary=os.environ.get("GITHUB_STEP_SUMMARY") or None,
    )
    try:
        return cls.from_options(options)
    except FormatUnavailable as exc:
        _refuse(str(exc))


def _refuse(message: str) -> NoReturn:
    typer.echo(f"ray-doctor: {message}", err=True)
    raise typer.Exit(2)


def _check_writable(output: Path) -> None:
    """Catch a --output that cannot be written before the work, not after it."""
    if output.is_dir():
        _refuse(f"cannot write {output}: it is a directory")
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        _refuse(f"cannot write {output}: no such directory {parent}")
    if not os.access(output if output.exists() else parent, os.W_OK):
        _refuse(f"cannot write {output}: permission denied")


def _emit(formatter, report, output: Path | None) -> None:
    """Write a report to stdout or to `output`; a file that cannot be written is exit 2."""
    if output is None:
        formatter.write(report, sys.stdout)
        sys.stdout.flush()
        return
    try:
        with open(output, "w", encoding="utf-8") as stream:
            formatter.write(report, stream)
    except OSError as exc:
        _refuse(f"cannot write {output}: {exc.strerror or exc}")


# Set by `main()`, the console entry point, whose process ends with the command: it then exits
# without tearing the model down object by object (~0.1 s at 10,000 trials, for nothing).
# In-process callers (typer's CliRunner, tests) get a plain typer.Exit.
_EXIT_AT_ONCE = False


def _finish(formatter, report, output: Path | None, quiet: bool) -> NoReturn:
    """Emit the report and exit with its code (0, 1 or 3; 2 never gets here)."""
    _emit(formatter, report, output)
    if output is not None and not quiet:
        typer.echo(f"ray-doctor: report written to {output}", err=True)
    code = int(report.exit_code)
    if _EXIT_AT_ONCE:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise typer.Exit(code)


def _emit_could_not_run(
    formatter, output_format: OutputFormat, command: str, target: str, reason: str, output
) -> NoReturn:
    """Exit 2: the reason on stderr, and (except on the terminal view, where that line is the
    report) a report in the chosen format, so CI still gets its SARIF / JUnit / summary."""
    from ray_doctor.report import could_not_run_report

    typer.echo(f"ray-doctor: {reason}", err=True)
    if output_format != OutputFormat.terminal:
        _emit(formatter, could_not_run_report(command, target, reason), output)
    raise typer.Exit(2)


@app.command()
def inspect(
    path: Annotated[
        Optional[str],  # noqa: UP045 - typer needs Optional on older Pythons
        typer.Argument(
            help="An experiment dir, a storage_path, a Train V2 run dir, a trial dir, a log "
            "file, '-' for stdin, or a URI (s3://, gs://, file://, ...). With --address: the "
            "job's experiment, when its output does not name it.",
            show_default=False,
        ),
    ] = None,
    logs: Annotated[
        Optional[list[str]],  # noqa: UP045 - typer needs Optional on older Pythons
        typer.Option(
            "--logs",
            "-l",
            help="A Ray session logs dir (/tmp/ray/session_*/logs) or a log file (e.g. the "
            "driver's output) to read too. Repeatable.",
        ),
    ] = None,
    output_format: FormatOption = OutputFormat.terminal,
    output: OutputOption = None,
    fail_on: FailOnOption = FailOn.error,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    max_rows: Annotated[
        int | None,
        typer.Option(
            "--max-rows",
            help="Trial rows in the terminal table (0: all; default 20, 5 when findings are "
            "grouped by cause).",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="Parallel reads.")] = 8,
    color: ColorOption = ColorMode.auto,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            "-w",
            help="Follow a running experiment: re-read what changed every --interval seconds "
            "and show findings as they happen; ends with the final report when the experiment "
            "ends, or on Ctrl-C.",
        ),
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, help="Seconds between --watch passes.")
    ] = 2.0,
    address: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--address",
            help="A live cluster's dashboard (http://HEAD:8265): read a Ray Job's driver log "
            "and every node's session logs, and the experiment the job's output names.",
        ),
    ] = None,
    job: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--job",
            help="With --address: the job's submission id.",
            show_default="the most recent failed job",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=1, help="With --address: seconds for reading the cluster."),
    ] = 120.0,
) -> None:
    """Read an experiment, find what went wrong, and say how to fix it."""
    from ray_doctor.report import build_inspect_report
    from ray_doctor.rules import run_rules
    from ray_doctor.scan import ScanFailure, scan

    formatter = _formatter(output_format, output, color, max_rows)
    if address is not None:
        if watch:
            _refuse("--watch follows a path or URI, not --address")
        _inspect_live(address, job, path, timeout, fail_on, quiet, formatter, output_format, output)
    if job is not None:
        _refuse("--job goes with --address")
    if path is None:
        _refuse("give a PATH to inspect (or --address for a live cluster)")
    if watch:
        if path == "-":
            _refuse("--watch follows a path or URI, not standard input")
        _inspect_watch(
            path, logs or [], interval, fail_on, workers, quiet, formatter, output_format, output
        )
    # One pass: the cyclic collector would only re-walk the growing model (a full collection
    # each time the heap grows by a quarter), ~20 % of the CPU of a 10,000-trial scan, and
    # the model holds no garbage cycles worth reclaiming. Restored for callers in-process.
    collecting = gc.isenabled()
    gc.disable()
    try:
        progress = _ProgressBar(enabled=not quiet and sys.stderr.isatty())
        try:
            result = scan(path, logs or [], stdin=sys.stdin, workers=workers, progress=progress)
        except ScanFailure as exc:
            progress.close()
            _emit_could_not_run(
                formatter, output_format, "inspect", shown_target(path), str(exc), output
            )
        progress.close()
        report = build_inspect_report(result, run_rules(result), fail_on.value)
        if result.interrupted:  # Ctrl-C: the partial report, then the conventional 130
            _emit(formatter, report, output)
            typer.echo("ray-doctor: interrupted; the report covers what was read", err=True)
            sys.stdout.flush()
            # Not sys.exit: that would wait for reads still in flight (a slow object store).
            os._exit(130)
        _finish(formatter, report, output, quiet)
    finally:
        if collecting:
            gc.enable()


def _inspect_live(
    address: str,
    job: str | None,
    path: str | None,
    timeout: float,
    fail_on: FailOn,
    quiet: bool,
    formatter,
    output_format: OutputFormat,
    output: Path | None,
) -> NoReturn:
    from ray_doctor.integrations.live import LiveFailure, inspect_live
    from ray_doctor.report import build_inspect_report
    from ray_doctor.rules import run_rules

    progress = _ProgressBar(enabled=not quiet and sys.stderr.isatty())
    try:
        result = inspect_live(address, job, path, timeout, progress)
    except LiveFailure as exc:
        progress.close()
        _emit_could_not_run(formatter, output_format, "inspect", address, str(exc), output)
    progress.close()
    report = build_inspect_report(result, run_rules(result), fail_on.value)
    _finish(formatter, report, output, quiet)


class _WatchView:
    """Shows `--watch` passes: a live report on a terminal, else one stderr line per new
    finding (what a log or a test reads)."""

    def __init__(self, target: str, formatter, live: bool, quiet: bool) -> None:
        self.target = target
        self.formatter = formatter
        self.quiet = quiet
        self.started = time.monotonic()
        self._live = None
        self._waiting_said = False
        if live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(), auto_refresh=False, transient=True)
            self._live.start()

    def __call__(self, current) -> None:
        if self._live is not None:
            self._show_live(current)
        elif not self.quiet:
            self._say(current)

    def _show_live(self, current) -> None:
        from rich.console import Group
        from rich.text import Text

        elapsed = time.monotonic() - self.started
        if current.report is None:
            status = f"waiting for {self.target}: {current.waiting}"
            self._live.update(Text(status, style="dim"), refresh=True)
            return
        status = (
            f"watching · pass {current.number} · {elapsed:.0f} s · read {current.read}, "
            f"unchanged {current.reused} · Ctrl-C stops"
        )
        view = Group(
            Text.from_ansi(self.formatter.render(current.report)), Text(status, style="dim")
        )
        self._live.update(view, refresh=True)

    def _say(self, current) -> None:
        stamp = f"[{time.monotonic() - self.started:6.1f} s]"
        if current.report is None and not self._waiting_said:
            sys.stderr.write(f"ray-doctor: {stamp} waiting: {current.waiting}\n")
            self._waiting_said = True
        for finding in current.new_findings:
            where = " / ".join(x for x in (finding.experiment, finding.trial_id) if x)
            sys.stderr.write(
                f"ray-doctor: {stamp} {finding.severity.value} {finding.rule} [{where}]: "
                f"{finding.message.splitlines()[0]}\n"
            )
        if current.ended:
            sys.stderr.write(f"ray-doctor: {stamp} the experiment ended\n")
        if current.stopped:
            sys.stderr.write(f"ray-doctor: {stamp} {current.stopped}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def _inspect_watch(
    path: str,
    logs: list[str],
    interval: float,
    fail_on: FailOn,
    workers: int,
    quiet: bool,
    formatter,
    output_format: OutputFormat,
    output: Path | None,
) -> NoReturn:
    from ray_doctor.report import TerminalFormatter
    from ray_doctor.watch import watch

    live = isinstance(formatter, TerminalFormatter) and output is None and sys.stdout.isatty()
    view = _WatchView(shown_target(path), formatter, live, quiet)
    try:
        last = watch(path, logs, interval, fail_on.value, workers, on_pass=view)
    except KeyboardInterrupt:
        last = None
    finally:
        view.close()
    if last is not None and last.stopped and view._live is not None:
        sys.stderr.write(f"ray-doctor: {last.stopped}\n")
    if last is None or last.report is None:
        reason = last.waiting if last is not None else "interrupted before the first pass"
        _emit_could_not_run(
            formatter, output_format, "inspect", shown_target(path), reason or "", output
        )
    _finish(formatter, last.report, output, quiet)


@app.command("verify-checkpoint")
def verify_checkpoint(
    path: Annotated[
        str,
        typer.Argument(
            help="A checkpoint dir, a checkpoint file (.pt .pth .bin .ckpt .pkl .safetensors), a "
            "torch.distributed.checkpoint dir, or a trial / experiment / storage dir (each "
            "checkpoint in it, as --all); a URI works too.",
            show_default=False,
        ),
    ],
    all_checkpoints: Annotated[
        bool,
        typer.Option("--all", help="Every checkpoint under a trial or experiment dir."),
    ] = False,
    against: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--against",
            help="Compare keys and shapes with this reference checkpoint, or 'previous' (with "
            "--all: each checkpoint with the one before it in its trial).",
        ),
    ] = None,
    values: Annotated[
        bool, typer.Option("--values/--no-values", help="Check tensor values for NaN / Inf.")
    ] = True,
    output_format: FormatOption = OutputFormat.terminal,
    output: OutputOption = None,
    fail_on: FailOnOption = FailOn.error,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No notes on stderr.")] = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """Check a checkpoint is whole, sane and safe to load, without executing it."""
    from ray_doctor.checkpoint import (
        RunDirGiven,
        VerifyFailure,
        diagnose,
        verify,
        verify_all,
        verify_path,
    )
    from ray_doctor.report import build_verify_report

    formatter = _formatter(output_format, output, color, 20)
    try:
        previous = against == "previous"
        if all_checkpoints:
            result = verify_all(path, values, against_previous=previous)
        else:
            result, run_dir = verify_path(path, values, against_previous=previous)
            if run_dir and not quiet:
                # Read whole, a run dir's own tuner.pkl would read as an unsafe checkpoint.
                typer.echo(
                    f"ray-doctor: {shown_target(path)} is {run_dir}, not a checkpoint: "
                    "verifying each checkpoint in it (as --all does)",
                    err=True,
                )
        reference = None
        if against and not previous:
            try:
                reference_result = verify(against, values=False)
            except RunDirGiven as given:
                raise VerifyFailure(
                    f"--against {shown_target(against)} is {given.what}: name one checkpoint in it"
                ) from None
            reference = reference_result.checkpoints[0] if reference_result.checkpoints else None
    except VerifyFailure as exc:
        _emit_could_not_run(
            formatter, output_format, "verify-checkpoint", shown_target(path), str(exc), output
        )
    report = build_verify_report(result, diagnose(result, reference), fail_on.value)
    _finish(formatter, report, output, quiet)


@app.command()
def smoke(
    gpus: Annotated[
        int, typer.Option("--gpus", min=0, help="GPUs to test (0: the CPU path, gloo).")
    ] = 0,
    workers: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--workers",
            min=1,
            help="Train workers for the allreduce [default: one per GPU, or 2 on the CPU].",
        ),
    ] = None,
    cpus_per_worker: Annotated[
        float, typer.Option("--cpus-per-worker", help="CPUs per worker and per smoke trial.")
    ] = 1.0,
    address: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--address",
            envvar="RAY_ADDRESS",
            help="Join this cluster (HOST:PORT, ray://HOST:PORT or auto) instead of starting a "
            "private local Ray instance.",
        ),
    ] = None,
    storage_path: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--storage-path",
            help="Where checkpoints go (a path or URI, as in RunConfig).",
            show_default="a private temp dir",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds for the whole run.")
    ] = 300.0,
    master_port: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--master-port",
            min=1,
            max=65535,
            help="Port to check on every worker node.",
            show_default="$MASTER_PORT, else 29500",
        ),
    ] = None,
    memory_fraction: Annotated[
        float,
        typer.Option("--memory-fraction", help="Fraction of free device memory to allocate."),
    ] = 0.5,
    stages: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--stage",
            help="Run only this stage (repeatable): cluster, device, collective, checkpoint, "
            "port, relaunch, environment.",
        ),
    ] = None,
    from_dir: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--from", help="Re-run a trial of this experiment (with --trial, --entrypoint)."
        ),
    ] = None,
    trial: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--trial", help="The trial id (or dir name) to re-run."),
    ] = None,
    entrypoint: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--entrypoint", help="The trainable: module:function or path/to/file.py:function."
        ),
    ] = None,
    iterations: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--iterations",
            min=1,
            help="Iterations to re-run.",
            show_default="up to where the original failed",
        ),
    ] = None,
    logs: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--logs", "-l", help="Logs of the original run, as for inspect (--from)."),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep smoke's experiments, logs and Ray temp dir.")
    ] = False,
    output_format: FormatOption = OutputFormat.terminal,
    output: OutputOption = None,
    fail_on: FailOnOption = FailOn.error,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
    color: ColorOption = ColorMode.auto,
) -> None:
    """Run real Ray Tune and Ray Train smoke trials to confirm or refute a diagnosis."""
    from ray_doctor.report import build_smoke_report
    from ray_doctor.smoke import (
        SmokeFailure,
        SmokeOptions,
        default_stages,
        plan_relaunch,
        run_smoke,
    )
    from ray_doctor.smoke._model import DEFAULT_MASTER_PORT

    formatter = _formatter(output_format, output, color, 20)
    try:
        relaunch = None
        if from_dir or trial or entrypoint:
            if not (from_dir and trial and entrypoint):
                raise SmokeFailure("--from, --trial and --entrypoint go together")
            relaunch = plan_relaunch(from_dir, trial, entrypoint, iterations, logs or [])
        if master_port is not None:
            port, port_from = master_port, "--master-port"
        elif os.environ.get("MASTER_PORT", "").isdigit():
            port, port_from = int(os.environ["MASTER_PORT"]), "$MASTER_PORT"
        else:
            port, port_from = DEFAULT_MASTER_PORT, "torch's default"
        selected = tuple(stages) if stages else default_stages(relaunch is not None)
        options = SmokeOptions(
            gpus=gpus,
            workers=workers,
            cpus_per_worker=cpus_per_worker,
            address=address,
            storage_path=storage_path,
            timeout_s=timeout,
            master_port=port,
            master_port_from=port_from,
            memory_fraction=memory_fraction,
            stages=("cluster", *[s for s in selected if s != "cluster"]),
            keep=keep,
            relaunch=relaunch,
        )
        progress = _StageProgress(enabled=not quiet and sys.stderr.isatty())
        result = run_smoke(options, progress, logs or [])
    except SmokeFailure as exc:
        _emit_could_not_run(formatter, output_format, "smoke", address or "local", str(exc), output)
    report = build_smoke_report(result, fail_on.value)
    if result.ended == "interrupted":  # the partial report, then the conventional 130
        _emit(formatter, report, output)
        typer.echo("ray-doctor: interrupted", err=True)
        raise typer.Exit(130)
    _finish(formatter, report, output, quiet)


class _StageProgress:
    """Stage lines on stderr as the runner reports them (a terminal only)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, event: dict) -> None:
        if not self.enabled:
            return
        if event["type"] == "start":
            sys.stderr.write(f"  … {event['stage']}\n")
        elif event["type"] == "stage":
            from ray_doctor.report._common import STAGE_MARK

            mark = STAGE_MARK.get(event["status"], "?")
            sys.stderr.write(f"  {mark} {event['name']} {event['duration_s']:.1f} s\n")


@app.command()
def schema() -> None:
    """Print the JSON Schema of the report."""
    from ray_doctor.report import schema_text

    sys.stdout.write(schema_text())


@app.command("rules")
def list_rules() -> None:
    """List the diagnosis rules and their ids, by the command that reports them."""
    from rich.console import Console
    from rich.table import Table

    from ray_doctor.rules import RULES

    console = Console()
    for command in ("inspect", "verify-checkpoint", "smoke"):
        # One short line per rule, so the list reads at 80 columns; `explain` has the rest.
        table = Table(box=None, pad_edge=False, show_header=False, title_justify="left")
        table.title = f"[bold]{command}[/bold]"
        table.add_column("id", no_wrap=True)
        table.add_column("severity", no_wrap=True)
        table.add_column("title", overflow="fold")
        for rule in RULES:
            if command in rule.commands:
                table.add_row(rule.id, rule.severity.value, rule.title)
        console.print(table)
        console.print()
    console.print("`ray-doctor explain ID` prints a rule's page: what it detects, why, the fix.")


@app.command()
def explain(rule_id: Annotated[str, typer.Argument(help="A rule id, e.g. trial-error.")]) -> None:
    """Print one rule's documentation."""
    from ray_doctor.rules import REGISTRY
    from ray_doctor.rules._docs import render_rule_doc

    rule = REGISTRY.get(rule_id)
    if rule is None:
        known = ", ".join(sorted(REGISTRY))
        typer.echo(f"ray-doctor: unknown rule {rule_id!r}; known rules: {known}", err=True)
        raise typer.Exit(2)
    sys.stdout.write(render_rule_doc(rule))


def main() -> None:
    """Console entry point: no traceback ever reaches the user unless asked for."""
    global _EXIT_AT_ONCE
    _EXIT_AT_ONCE = True
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("ray-doctor: interrupted\n")
        sys.exit(130)
    except Exception as exc:  # the last line of defence; a bug, reported in one line
        if os.environ.get("RAY_DOCTOR_DEBUG"):
            raise
        sys.stderr.write(
            f"ray-doctor: internal error: {type(exc).__name__}: {exc} "
            "(set RAY_DOCTOR_DEBUG=1 for the traceback)\n"
        )
        sys.exit(2)
