"""The `bwbench` command line: run, list, info, report.

Exit codes: 0 success; 1 an implementation failed its check or errored (its record says why);
2 usage or input error, or no GPU; 130 interrupted by Ctrl-C or SIGTERM (the results measured so
far are kept).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from typer.core import TyperGroup

from .console import comparison_table, device_table, make_console, plain, problems, summary_tables
from .gate import check_baseline, check_baseline_device, check_baseline_method
from .outputs import check_gate_outputs, check_report_output, check_run_outputs, check_store_output

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

def _is_click_usage_error(err: BaseException) -> bool:
    """Click's ClickException, told by its shape: typer vendors click since 0.22 and used the
    click package before, so the class to catch depends on the version installed."""
    return callable(getattr(err, "format_message", None)) and isinstance(getattr(err, "exit_code", None), int)


LIST_METAVAR = "A,B"
"""The metavar of an option whose one value is a comma-separated list (list_option): --help shows
the shape, and an option given twice is told to join its values in one, not to pick one of them."""


def list_option(default, *names: str, help: str):
    """typer.Option whose value is a comma-separated list, declared by its metavar."""
    return typer.Option(default, *names, help=help, metavar=LIST_METAVAR)


def _repeated_option(command, args: list[str]) -> str | None:
    """What is wrong where an option of `command` that takes one value is given more than once
    (None where none is): click keeps the last silently, so `--impl mine --impl torch` measured
    torch alone."""
    if hasattr(command, "commands") and args:  # a group (`store import`): its subcommand's options
        return _repeated_option(command.commands.get(args[0]), args[1:])
    single, takes_value = {}, set()
    for param in getattr(command, "params", []):  # by shape: typer vendors click since 0.22
        if getattr(param, "param_type_name", None) == "option" and not param.is_flag:
            takes_value.update(param.opts)
            if not param.multiple:
                for opt in param.opts:
                    single[opt] = (max(param.opts, key=len), getattr(param, "metavar", None) == LIST_METAVAR)
    seen: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        opt = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if opt in single:
            name, listed = single[opt]
            if name in seen:
                return f"{name} is given twice: give it once" + (f", its values comma-separated ({name} a,b)" if listed else "")
            seen.add(name)
        if opt in takes_value and opt == arg:
            i += 1  # its value, whatever it looks like
        i += 1
    return None


class OneLineErrors(TyperGroup):
    """Click's own usage errors (an unknown command, a value that is no number, a missing argument)
    as the one `error:` line and exit 2 that bwbench's own checks give, not typer's framed box."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        given = list(sys.argv[1:] if args is None else args)
        command = self.commands.get(given[0]) if given else None
        repeated = _repeated_option(command, given[1:]) if command is not None else None
        if repeated is not None and standalone_mode:
            console.print(f"[bold red]error:[/] {plain(repeated)}", soft_wrap=True)
            sys.exit(EXIT_USAGE)
        try:
            code = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                standalone_mode=False, **extra)
        except typer.Abort:
            if not standalone_mode:
                raise
            sys.exit(EXIT_INTERRUPTED)
        except Exception as err:
            if not standalone_mode or not _is_click_usage_error(err):
                raise
            if type(err).__name__ != "NoArgsIsHelpError":  # its help is already printed
                ctx = getattr(err, "ctx", None)
                hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
                console.print(f"[bold red]error:[/] {plain(err.format_message())}{plain(hint)}", soft_wrap=True)
            sys.exit(err.exit_code)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else EXIT_OK)


app = typer.Typer(
    cls=OneLineErrors,
    name="bwbench",
    help="Benchmark memory-bound GPU kernels against the bandwidth the card can actually move.\n\n"
         "Every implementation is checked against a float64 reference before it is timed; effective "
         "bandwidth (bytes moved / time) is compared with a same-size device-to-device copy measured "
         "in the same run ('% of copy') and with the theoretical peak from NVML.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = make_console()


def _print_version(value: bool) -> None:
    if value:
        from . import __version__

        console.print(f"bwbench {__version__}", markup=False)
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print bwbench's version and exit.")) -> None:
    pass


class UsageError(Exception):
    """Bad input from the user: printed as a message, exit code 2."""


def fail(message: str, code: int = EXIT_USAGE) -> None:
    console.print(f"[bold red]error:[/] {plain(message)}", soft_wrap=True)
    raise typer.Exit(code)


class ReportUnavailable(UsageError):
    """The HTML report needs plotly, which is not importable here."""


def require_plotly() -> None:
    """A missing plotly (it carries plotly.js) as ReportUnavailable: a message, not a traceback."""
    import importlib

    try:
        importlib.import_module("plotly")
    except ImportError as err:
        raise ReportUnavailable(
            f"no HTML report: plotly is not importable here ({err}); `pip install plotly`, or build the "
            "report on another machine with `bwbench report RESULTS.json`") from None


def write_html_report(documents, target: Path, title: Optional[str] = None) -> None:
    """write_report, with a missing plotly turned into ReportUnavailable."""
    require_plotly()
    from .report import write_report

    write_report(documents, target, title)


def split_list(value: Optional[str], option: str = "") -> list[str]:
    """Comma-separated names; an option left out is [] (all). One given but naming nothing
    (`--impl ""`, `--impl ,`, an unset variable in a CI script) is refused: it would select all."""
    if value is None:
        return []
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise UsageError(f"{option or 'the option'} {value!r} names nothing: give names, or leave it out for all")
    return names


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?|\.[0-9]+(?:e[0-9]+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
"""A number Python's float reads ('1.5.5' and '.' are not), then a unit."""


def parse_size(text: str, positive: bool = False) -> int:
    """'4GB' -> 4e9, '512MiB' -> 512 * 2**20, '1000' -> 1000 bytes (more than none if `positive`)."""
    match = _SIZE.match(text)
    if not match:
        raise UsageError(f"cannot read {text!r} as a size (examples: 4GB, 512MiB, 1e9)")
    number, unit = float(match.group(1)), (match.group(2) or "").lower().rstrip("b")
    if not math.isfinite(number):
        raise UsageError(f"cannot read {text!r} as a size (examples: 4GB, 512MiB, 1e9)")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
    if positive and number * scale.get(unit, 1) < 1:  # '0.5' is no whole byte: a copy of nothing
        raise UsageError(f"cannot read {text!r} as a positive size (examples: 4GB, 512MiB, 1e9)")
    if unit not in scale:
        raise UsageError(f"unknown size unit in {text!r}")
    return int(number * scale[unit])


def parse_axis_args(extra: list[str], axis_options: list[str]) -> dict[str, list[str]]:
    """`--cols 1024,4096`, `--cols=1024` and `--axis cols=1024,4096` all select axis values."""
    selected: dict[str, list[str]] = {}
    for item in axis_options:
        if "=" not in item:
            raise UsageError(f"--axis takes NAME=VALUES, e.g. --axis cols=1024,4096 (got {item!r})")
        name, values = item.split("=", 1)
        if name.strip() in selected:
            raise UsageError(f"--axis {name.strip()} is given twice: give its values once, comma-separated")
        selected[name.strip()] = split_list(values, f"--axis {name.strip()}")
    i = 0
    while i < len(extra):
        token = extra[i]
        if not token.startswith("--") or len(token) < 3:
            raise UsageError(f"unexpected argument {token!r}")
        if "=" in token:
            name, values = token[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(extra) or extra[i + 1].startswith("--"):
                raise UsageError(f"{token} is no option of this command, and as an axis it needs values, "
                                 f"e.g. {token} 1024,4096 (see --help, and `bwbench list` for the axes)")
            name, values = token[2:], extra[i + 1]
            i += 2
        key = name.replace("-", "_")
        if key in selected:  # `--rows 4096 --rows 8` kept the last one without a word
            raise UsageError(f"--{name} is given twice: give its values once, comma-separated (--{name} 1024,4096)")
        selected[key] = split_list(values, f"--{name}") if ";" not in values else \
            [v.strip() for v in values.split(";") if v.strip()]
    return selected


def _guard(fn, warnings_to=None):
    """Turn the errors a user can cause into a message and an exit code instead of a traceback;
    warnings go to `warnings_to` (a console on stderr where stdout carries a command's output)."""
    import warnings

    from .device import NoGpuError
    from .gate import GateInputError
    from .outputs import OutputError
    from .profile import ProfilerUnavailable
    from .results import ResultsWarning
    from .suite import SelectionError, SuiteDefinitionError
    from .timing import TimerUnavailable

    def show(message, category, *_args, **_kwargs):
        (warnings_to or console).print(f"[yellow]warning:[/] {plain(message)}", soft_wrap=True)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", ResultsWarning)
            warnings.showwarning = show
            return fn()
    except OutputError as err:
        fail(str(err))
    except (UsageError, SelectionError) as err:
        fail(str(err))
    except NoGpuError as err:
        fail(str(err))
    except SuiteDefinitionError as err:
        fail(f"broken suite definition: {err}")
    except GateInputError as err:
        fail(str(err))
    except ProfilerUnavailable as err:
        fail(str(err))
    except TimerUnavailable as err:
        fail(str(err))


def _measurements(plans) -> int:
    """Records a run of these plans makes: each case's implementations and its same-size copy."""
    return sum(len(p.cases) * (len(p.impls) + 1) for p in plans)


def _default_stem(suite: str, gpu_name: str) -> str:
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", gpu_name).strip("-").lower() or "gpu"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    suite = re.sub(r"[^\w.+-]+", "-", suite).strip("-.") or "suite"  # a file name inside --out, whatever the name holds
    return f"{suite}-{gpu}-{stamp}"


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    suite: str = typer.Argument(..., help="Suite to run (see `bwbench list`), a suite file (./my_suite.py) or a folder of them; several as a comma-separated list (softmax,./mine.py), or `all`, go into one results file."),
    dtype: Optional[str] = list_option(None, "--dtype", "-d", help="Comma-separated dtypes, e.g. float16,bfloat16 (default: the suite's default)."),
    impl: Optional[str] = list_option(None, "--impl", "-i", help="Comma-separated implementations (default: all). The copy ceiling is always measured."),
    axis: List[str] = typer.Option([], "--axis", "-a", help="Axis values NAME=V1,V2 (repeatable). Shorthand: --NAME V1,V2, e.g. --cols 1024,4096."),
    quick: bool = typer.Option(False, "--quick", help="A smoke sweep of a few small shapes."),
    preset: Optional[str] = list_option(None, "--preset", help="A named sweep of the suite instead of its default one: `models` (shapes of real models), `odd` (non-power-of-two and prime widths), or several, comma-separated (`odd,models`); `bwbench list` shows each suite's presets."),
    timing: str = typer.Option("cold", "--timing", help="cold: L2 flushed before every sample (default); hot: back-to-back launches replayed from a CUDA graph."),
    timer: str = typer.Option("auto", "--timer", help="Clock of cold samples: cupti (kernel and copy times from CUPTI; needs the cupti extra, cupti-python 13.0.x), events (CUDA events around each call, which add about 2 µs), auto (cupti where it works, else events; default)."),
    max_time: float = typer.Option(1.0, "--max-time", help="Seconds of sampling per measurement before giving up on the noise target."),
    noise: float = typer.Option(0.002, "--noise", help="Stop sampling once the median's relative standard error is below this (after --min-samples)."),
    min_samples: int = typer.Option(20, "--min-samples", help="Samples taken before the noise target can stop sampling."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs (each case's inputs are fixed by this seed and the case itself)."),
    out: Path = typer.Option(Path("reports"), "--out", "-o", help="Folder for the results JSON, CSV and HTML report."),
    name: Optional[str] = typer.Option(None, "--name", help="File name stem, without folders (default SUITE-GPU-TIMESTAMP-TAG, never an existing file)."),
    report: bool = typer.Option(True, "--report/--no-report", help="Write the HTML report at the end."),
    gpu: int = typer.Option(0, "--gpu", help="CUDA device index."),
    copy_size: str = typer.Option("4GB", "--copy-size", help="Buffer size of the device copy-bandwidth measurement."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="Gate: a results file to compare with at the end; exit 1 on a real regression."),
    max_drop: str = typer.Option("5%", "--max-drop", help="Gate threshold for --baseline (5% or 0.05)."),
    min_copy_fraction: Optional[float] = typer.Option(None, "--min-copy-fraction", help="Gate: exit 1 when an implementation run reaches less than this fraction of the same-run copy bandwidth (e.g. 0.9 with --impl optimized)."),
    store: Optional[Path] = typer.Option(None, "--store", help="Results store the finished run is added to (default: OUT/bwbench-history.sqlite)."),
    no_store: bool = typer.Option(False, "--no-store", help="Do not add the run to the results store."),
    force: bool = typer.Option(False, "--force", help="Replace the files of an existing --name (never the --baseline file)."),
    allow_partial: bool = typer.Option(False, "--allow-partial", help="Gate: let invalid numbers and an interrupted baseline pass (reported, exit 0)."),
    gpus: Optional[str] = list_option(None, "--gpus", help="Fleet run: `all` or 0,1,... GPUs of this host, one Dask worker each, merged into one results file with a health check (needs bwbench\\[fleet])."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Fleet run on every GPU worker (--resources GPU=1) of the Dask scheduler at this address, e.g. tcp://HOST:8786."),
    fail_on_outlier: bool = typer.Option(False, "--fail-on-outlier", help="Fleet run: exit 1 when a GPU is more than --outlier-threshold below the fleet median."),
    outlier_threshold: str = typer.Option("5%", "--outlier-threshold", help="Fleet run: how far below the fleet median (copy bandwidth, optimized % of copy) flags a GPU."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the selection and print the cases and implementations the run would measure, then stop: no GPU needed, no file written."),
):
    """Sweep a suite (or several, or `all`): check every implementation against the reference, time it, write results and a report.

    Axis values can be chosen with --NAME VALUES (e.g. --cols 1024,4096 --rows 4096) or --axis NAME=VALUES.
    Results stream into OUT/NAME.jsonl (a line a record, so an interrupted run keeps what it measured), exported as OUT/NAME.json when the run ends; also OUT/NAME.csv and OUT/NAME.html. An existing NAME is replaced only with --force.
    """
    from .session import SessionSettings
    from .stats import SamplingPolicy
    from .timing import TIMING_MODES, check_timer_kind

    def prepare():
        from .discovery import resolve
        from .session import SuitePlan

        if timing not in TIMING_MODES:
            raise UsageError(f"--timing must be one of {', '.join(TIMING_MODES)}, not {timing!r}")
        check_timer_kind(timer)
        if not (0 < max_time < math.inf and 0 < noise < math.inf) or min_samples < 1:
            raise UsageError("--max-time and --noise must be positive and --min-samples at least 1")
        if gpu < 0:
            raise UsageError(f"--gpu takes a device index of 0 or more (got {gpu})")
        plans = []
        axis_args = parse_axis_args(list(ctx.args), axis)
        for chosen in resolve(suite):
            impls = chosen.select_impls(split_list(impl, "--impl"))
            axis_values = {name_: chosen.parse_axis_values(name_, values) for name_, values in axis_args.items()}
            cases = chosen.cases(split_list(dtype, "--dtype"), axis_values, quick=quick, preset=preset)
            chosen.check_traffic(cases, given=axis_values, impls=impls)  # exit 2 here, not a traceback mid-sweep
            plans.append(SuitePlan(chosen, impls, cases))
        gates = _prepare_gates(baseline, max_drop, min_copy_fraction, allow_partial)
        if timing == "hot" or timer != "auto":  # the clock is known now; auto's is checked once chosen
            check_baseline_method(gates.baseline, timing, timer)
        check_run_outputs(out, name, force, [baseline] if baseline else [])
        if store is not None and not no_store:  # found unusable only after the sweep, it would cost the history entry
            check_store_output(store, out, name)
        if gpus is not None or scheduler is not None:  # a fleet's choices, checked by --dry-run too
            from .fleet.command import FleetOptions, check_fleet_choices
            from .fleet.request import GpuSelectionError

            try:
                check_fleet_choices(FleetOptions(gpus, scheduler, fail_on_outlier, outlier_threshold))
            except GpuSelectionError as err:
                raise UsageError(str(err)) from None
        return plans, parse_size(copy_size, positive=True), gates

    plans, copy_bytes, gates = _guard(prepare)
    if dry_run:
        from .console import plan_table

        console.print(plan_table(plans))
        console.print(f"[dim]{_measurements(plans)} measurements (every case also times the same-size copy)[/]")
        raise typer.Exit(0)
    store_path = None if no_store else (store or out / "bwbench-history.sqlite")
    if gpus is not None or scheduler is not None:  # many GPUs through Dask (bwbench/fleet)
        from .fleet.command import FleetOptions, FleetOutput, request_from_plans, run_fleet

        request = request_from_plans(plans, split_list(impl, "--impl"), split_list(dtype, "--dtype"), parse_axis_args(list(ctx.args), axis),
                                     quick=quick, preset=preset, timing=timing, max_time=max_time, noise=noise,
                                     min_samples=min_samples, seed=seed, copy_bytes=copy_bytes, timer=timer)
        raise typer.Exit(_guard(lambda: run_fleet(
            request, FleetOptions(gpus, scheduler, fail_on_outlier, outlier_threshold), FleetOutput(out, name, report, force, store_path),
            {"suite": suite, "dtype": dtype, "impl": impl, "axes": request.axes, "quick": quick, "preset": preset, "timing": timing, "timer": timer,
             "max_time": max_time, "noise": noise, "min_samples": min_samples, "seed": seed, "argv": sys.argv[1:]},
            {p.suite.name: p.suite.describe() for p in plans}, console,
            records_per_gpu=_measurements(plans),
            apply_gates=lambda part: _apply_gates(gates, part))))
    settings = SessionSettings(timing=timing, seed=seed, copy_bytes=copy_bytes, timer=timer,
                               policy=SamplingPolicy(min_samples=min_samples, max_median_error=noise, max_seconds=max_time))
    code = _guard(lambda: _run_measured(
        plans, settings, out, name, report, gpu, gates, force=force, protected=[baseline] if baseline else [],
        options={"suite": suite, "dtype": dtype, "impl": impl, "axes": parse_axis_args(list(ctx.args), axis),
                 "quick": quick, "preset": preset, "timing": timing, "timer": timer, "max_time": max_time, "noise": noise,
                 "min_samples": min_samples, "seed": seed, "argv": sys.argv[1:]},
        store_path=store_path))
    raise typer.Exit(code)


@dataclass
class Gates:
    """The checks a CI job asks of a run, applied to its records once it ends."""

    baseline: object | None = None
    max_drop: float = 0.05
    min_copy_fraction: float | None = None
    allow_partial: bool = False


def _prepare_gates(baseline: Optional[Path], max_drop: str, min_copy_fraction: Optional[float],
                   allow_partial: bool = False) -> Gates:
    """Read the baseline up front, so a bad gate argument fails before any GPU time is spent."""
    from .gate import check_threshold, parse_fraction
    from .results import read_document

    gates = Gates(max_drop=parse_fraction(max_drop), min_copy_fraction=min_copy_fraction, allow_partial=allow_partial)
    check_threshold(gates.max_drop)
    if min_copy_fraction is not None and not 0 < min_copy_fraction <= 1.5:
        raise UsageError(f"--min-copy-fraction takes a fraction such as 0.9 (got {min_copy_fraction})")
    if baseline is not None:
        try:
            gates.baseline = read_document(baseline)
        except ValueError as err:
            raise UsageError(f"--baseline: {err}") from None
        check_baseline(gates.baseline, allow_partial)
    return gates


def _apply_gates(gates: Gates, document) -> bool:
    """Print each gate's verdict; True when every gate passed."""
    from .gate import compare_runs, copy_fraction_violations

    passed = True
    if gates.baseline is not None:
        comparisons = compare_runs(gates.baseline, document, gates.max_drop)
        console.print(comparison_table(comparisons, gates.max_drop))
        passed &= gate_passes(comparisons, gates.baseline, document, gates.allow_partial)
    if gates.min_copy_fraction is not None:
        violations = copy_fraction_violations(document, gates.min_copy_fraction)
        for v in violations:
            got = "failed" if v.pct_copy is None else f"{v.pct_copy:.1f}%"
            console.print(f"[bold red]below floor[/] {plain(f'{v.suite} {v.case} {v.dtype} {v.impl}')}: {got} of copy "
                          f"(needs {v.required_pct:.0f}%)", soft_wrap=True)
        if not violations:
            console.print(f"[green]every implementation at or above {gates.min_copy_fraction:.0%} of copy[/]")
        passed &= not violations
    return passed


def gate_passes(comparisons, baseline, current, allow_partial: bool, screen=None) -> bool:
    """The baseline gate's decision, with a line for each run that stopped early."""
    from .gate import gate_fails, partial_runs

    partial = partial_runs(baseline, current)
    for line in partial:
        (screen or console).print(f"[bold red]partial run[/]: {plain(line)}"
                      + (" (allowed by --allow-partial)" if allow_partial else " (--allow-partial accepts it)"))
    return not gate_fails(comparisons, partial, allow_partial)


def _run_measured(plans, settings, out, name, want_report, gpu, gates, options,
                  store_path=None, force=False, protected=()) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .device import query_device, require_cuda
    from .interrupts import terminate_as_interrupt
    from .outputs import make_folder, results_stem
    from .results import write_csv
    from .session import Session, fails_run
    from .store import add_finished_run

    if gates.baseline is not None:  # a baseline from another GPU model: refused before any measuring
        check_baseline_device(gates.baseline, query_device(require_cuda(gpu)).gpu_name)
    with console.status("measuring the device copy bandwidth…"):
        session = Session.open(gpu, settings)
    info = session.environment
    choice = session.timer.choice
    check_baseline_method(gates.baseline, settings.timing, choice.used)  # before the sweep
    options["timer_choice"] = choice.to_dict()
    console.print(f"timer: {choice.used}" + ("" if choice.reason == "asked for" else f" ({escape(choice.reason)})"),
                  soft_wrap=True)
    for plan in plans:
        console.print(f"[bold]{plain(plan.suite.name)}[/]: {len(plan.cases)} cases × {len(plan.impls)} implementations "
                      f"+ copy ceiling on {plain(session.gpu_name)}")
    label = plans[0].suite.name if len(plans) == 1 else ("all" if options.get("suite") == "all" else "suites")
    stem = results_stem(out, name, _default_stem(label, session.gpu_name), force, protected)
    make_folder(out)
    paths = {ext: out / f"{stem}.{ext}" for ext in ("json", "csv", "html")}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("starting", total=_measurements(plans))
        with terminate_as_interrupt():  # a job's time limit keeps what was measured, as Ctrl-C does
            document = session.run(plans, output=paths["json"], options=options, replace=force,
                                   on_record=lambda rec: progress.advance(task),
                                   on_step=lambda text: progress.update(task, description=text))
    interrupted = document.interrupted
    write_csv(document, paths["csv"])
    if note := add_finished_run(paths["json"], store_path):
        console.print(note, markup=False, soft_wrap=True)
    for table in summary_tables(document.records):
        console.print(table)
    for line in problems(document.records):
        console.print(line, soft_wrap=True)
    if info.get("copy_gbps"):
        console.print(f"device copy bandwidth {info['copy_gbps']:,.0f} GB/s"
                      + (f", theoretical peak {info['peak_gbps']:,.0f} GB/s" if info.get("peak_gbps") else ""))
    if want_report and document.records:
        try:  # the results are written; a missing plotly costs only the page
            write_html_report([(session.gpu_name, document)], paths["html"])
            console.print(f"report:  {plain(paths['html'])}")
        except ReportUnavailable as err:
            console.print(f"[yellow]warning:[/] {err}", soft_wrap=True)
    console.print(f"results: {plain(paths['json'])} (CSV: {plain(paths['csv'])})")
    if interrupted:
        console.print(f"[yellow]interrupted[/]: {len(document.records)} records kept in {plain(paths['json'])}")
        return EXIT_INTERRUPTED
    gates_passed = _apply_gates(gates, document)
    failed = any(fails_run(r) for r in document.records)
    return EXIT_FAILED if failed or not gates_passed else EXIT_OK


@app.command("list")
def list_suites(
    source: Optional[str] = typer.Argument(None, help="A suite file or folder (or a comma-separated mix with names); default: every suite bwbench knows (its own, $BWBENCH_SUITES_PATH, the bwbench.suites entry points)."),
):
    """List the suites, their axes (and the named sweeps `run --preset` takes), dtypes and implementations."""
    from rich.table import Table

    from .discovery import BrokenSuite, listing
    from .suite import kind_order

    def show() -> int:
        entries = listing(source)
        table = Table(title="bwbench suites", title_justify="left")
        for col in ("suite", "description", "axes (default sweep)", "dtypes", "implementations"):
            table.add_column(col)
        for name, entry in entries.items():
            if isinstance(entry, BrokenSuite):
                table.add_row(plain(name), f"[red]cannot load {plain(entry.where)}: {plain(entry.error)}[/]", "", "", "")
                continue
            described = entry.describe()
            axes = "\n".join(f"{k}: {', '.join(map(str, v))}" for k, v in described["axes"].items())
            if described["presets"]:  # the sweeps `run --preset NAME` takes instead
                axes += "\npresets: " + ", ".join(described["presets"])
            dtypes = ", ".join(f"[bold]{plain(d)}[/]" if d in entry.default_dtypes else plain(d) for d in entry.dtypes)
            order = {k: i for i, k in enumerate(kind_order(i.kind for i in entry.implementations.values()))}
            impls = "\n".join(f"{i.name} ({i.kind}{', baseline' if i.is_baseline else ''})"
                              for i in sorted(entry.implementations.values(), key=lambda i: order[i.kind]))
            table.add_row(plain(name), plain(entry.description) + (f"\n[dim]{plain(entry.source)}[/]" if source else ""),
                          plain(axes), dtypes, plain(impls))
        console.print(table)
        console.print("[dim]bold dtype = default; every run also measures the same-size copy ceiling[/]")
        broken = [e for e in entries.values() if isinstance(e, BrokenSuite)]
        if source and broken:
            fail("; ".join(f"cannot load {e.where}: {e.error}" for e in broken))
        return EXIT_OK

    raise typer.Exit(_guard(show))


@app.command()
def info(
    gpu: int = typer.Option(0, "--gpu", help="CUDA device index."),
    copy_size: str = typer.Option("4GB", "--copy-size", help="Buffer size of the copy-bandwidth measurement."),
    json_out: bool = typer.Option(False, "--json", help="Print the facts as JSON."),
):
    """The GPU, its software, its theoretical peak and its measured copy bandwidth."""

    def measure():
        import json

        from .session import Session, SessionSettings

        facts = Session.open(gpu, SessionSettings(copy_bytes=parse_size(copy_size, positive=True)), telemetry=False).environment
        if json_out:
            print(json.dumps(facts, indent=1))
        else:
            console.print(device_table(facts))

    _guard(measure)


@app.command("report")
def report_cmd(
    files: List[Path] = typer.Argument(..., help="Results JSON files (one run, or several to compare)."),
    output: Path = typer.Option(None, "--output", "-o", help="HTML file to write (default: next to the first results file)."),
    suite: Optional[str] = list_option(None, "--suite", "-s", help="Comma-separated suites to show (default: all in the files)."),
    impl: Optional[str] = list_option(None, "--impl", "-i", help="Comma-separated implementations to show (the copy ceiling always stays)."),
    dtype: Optional[str] = list_option(None, "--dtype", "-d", help="Comma-separated dtypes to show."),
    title: Optional[str] = typer.Option(None, "--title", help="Page title (default: the suites shown)."),
):
    """Build the HTML report from results files (no GPU needed): a summary first, then a section per suite and dtype."""

    def build():
        from .report import ReportFilterError, filter_documents
        from .results import read_document
        from .summary import merge_same_gpu, one_run_per_gpu, run_labels

        target = output or files[0].with_suffix(".html")
        check_report_output(target, files)
        docs = []
        for path in files:
            try:
                docs.append(read_document(path))
            except ValueError as err:
                raise UsageError(str(err)) from None
        if not any(d.records for d in docs):  # an empty page would look like a report of nothing wrong
            raise UsageError(f"{', '.join(str(p) for p in files)}: no records to report (the run measured nothing "
                             "before it stopped)")
        docs, stems = merge_same_gpu(*one_run_per_gpu(docs, [p.stem for p in files]))
        labels = run_labels([d.environment.get("gpu_name") for d in docs], stems)
        try:
            documents = filter_documents(list(zip(labels, docs)), split_list(suite, "--suite"), split_list(impl, "--impl"), split_list(dtype, "--dtype"))
        except ReportFilterError as err:
            raise UsageError(str(err)) from None
        write_html_report(documents, target, title)
        console.print(f"report: {plain(target)}")

    _guard(build)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def profile(
    ctx: typer.Context,
    suite: str = typer.Argument(..., help="Suite to profile (see `bwbench list`), or a suite file."),
    impl: str = list_option(..., "--impl", "-i", help="Comma-separated implementations to profile."),
    case: List[str] = typer.Option([], "--case", "-c", help="Axis value NAME=VALUE (repeatable), e.g. --case cols=4096. Shorthand: --cols 4096. Unnamed axes take the suite's first value."),
    dtype: Optional[str] = typer.Option(None, "--dtype", "-d", help="dtype (default: the suite's default)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    out: Path = typer.Option(Path("reports"), "--out", "-o", help="Folder for the profile's results JSON."),
    gpu: int = typer.Option(0, "--gpu", help="CUDA device index."),
):
    """Nsight Compute on one case: DRAM bytes really moved against the byte model, ncu time against bwbench's.

    Runs the case through the usual check and cold timing, then profiles one call of each implementation under `ncu --clock-control none` on the very inputs that were checked (regenerated from their seed), filtered to that call with an NVTX range, summing dram__bytes_read.sum, dram__bytes_write.sum and gpu__time_duration.sum over the kernels it launches. The figures go into a results file (record.extra["profile"]) that `bwbench report` reads.
    """

    def measure() -> int:
        from rich.table import Table

        from .discovery import get_suite
        from .outputs import check_writable_folder, make_folder, results_stem
        from .profile import find_ncu, profile_hook
        from .session import Session, SessionSettings, SuitePlan
        from .stats import SamplingPolicy

        chosen = get_suite(suite)
        impls = chosen.select_impls(split_list(impl, "--impl"))
        wanted = parse_axis_args(list(ctx.args), case)
        values = {a: chosen.parse_axis_values(a, v) for a, v in wanted.items()}
        for a, v in values.items():
            if len(v) != 1:
                raise UsageError(f"profile takes one value per axis (got {len(v)} for {a})")
        if chosen.points is None:
            values = {a: values.get(a, [vals[0]]) for a, vals in chosen.axes.items()}
        cases = chosen.cases(split_list(dtype, "--dtype"), values)
        if len(cases) > 4:
            raise UsageError(f"that selects {len(cases)} cases; profile one at a time (name every axis)")
        find_ncu()
        check_writable_folder(out)
        session = Session.open(gpu, SessionSettings(seed=seed, policy=SamplingPolicy(max_seconds=0.5)),
                               measure_copy=False)
        make_folder(out)
        path = out / f"{results_stem(out, None, _default_stem(chosen.name, session.gpu_name) + '-profile', False)}.json"
        table = Table(title=f"{chosen.name}: DRAM bytes measured by Nsight Compute against the byte model")
        for col in ("case", "dtype", "impl", "kernels", "model MB", "DRAM MB", "DRAM / model",
                    "bwbench µs", "write-back µs", "events µs", "CUPTI µs", "ncu µs", "ncu / bwbench"):
            table.add_column(col, justify="left" if col in ("case", "dtype", "impl") else "right")
        hook = profile_hook(chosen, gpu, on_profile=lambda c, name: console.print(f"[dim]ncu on {escape(name)} {escape(str(c))}…[/]"),
                            timer=session.timer)
        with console.status(f"checking, timing and profiling {len(cases)} case(s)…"):
            document = session.run([SuitePlan(chosen, impls, cases)], output=path, after_timing=hook,
                                   options={"profile": True, "argv": sys.argv[1:]})
        for rec in document.records:
            if rec.impl == "copy":
                continue
            result = (rec.extra or {}).get("profile")
            if rec.status != "ok" or not result:
                table.add_row(plain(rec.case), plain(rec.dtype), plain(rec.impl), rec.status, *[""] * 9)
                continue
            table.add_row(rec.case, rec.dtype, rec.impl, str(result["kernel_count"]),
                          f"{result['model_bytes'] / 1e6:,.1f}", f"{result['dram_bytes'] / 1e6:,.1f}",
                          f"{result['bytes_ratio']:.2f}×", f"{result['bwbench_median_us']:,.1f}",
                          _us(result.get("writeback_us")), _us(result.get("events_median_us")), _us(result.get("cupti_median_us")),
                          f"{result['ncu_time_us']:,.1f}",
                          f"{result['time_ratio']:.2f}" if result.get("time_ratio") else "—")
        console.print(table)
        console.print(f"results: {path}")
        return EXIT_OK

    raise typer.Exit(_guard(measure))


def _us(value) -> str:
    return f"{value:,.1f}" if isinstance(value, (int, float)) else "—"


@app.command()
def compare(
    baseline: Path = typer.Argument(..., help="Results JSON of the baseline run (with --against-store: the run to judge)."),
    current: Optional[Path] = typer.Argument(None, help="Results JSON of the run to judge."),
    max_drop: str = typer.Option("5%", "--max-drop", help="Smallest drop in median GB/s that counts as a regression (5% or 0.05)."),
    ignore_gpu: bool = typer.Option(False, "--ignore-gpu", help="Compare runs made on different GPU models (a ratio summary comes first)."),
    ignore_timing: bool = typer.Option(False, "--ignore-timing", help="Compare runs timed differently (cold or hot, events or CUPTI, write-back charged or not), which is refused otherwise: it moves cases of a few microseconds more than any threshold."),
    markdown_out: Optional[Path] = typer.Option(None, "--markdown", help="Also write a markdown summary (for a CI job summary) to this file ('-' for stdout; the table then goes to stderr)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the verdicts as JSON to this file ('-' for stdout; the table then goes to stderr)."),
    show_all: bool = typer.Option(False, "--all", help="List unchanged records too."),
    impl: Optional[str] = list_option(None, "--impl", "-i", help="Comma-separated implementations to judge (default: all); e.g. optimized, so that drift in a baseline library does not fail the gate."),
    allow_partial: bool = typer.Option(False, "--allow-partial", help="Let invalid numbers (NaN, infinite, negative or zero GB/s) and a run that stopped early pass the gate (still reported)."),
    min_bytes: str = typer.Option("0", "--min-bytes", help="Leave out records that move fewer bytes, e.g. 64MB: cases of a few microseconds drift between runs by more than --max-drop."),
    against_store: bool = typer.Option(False, "--against-store", help="Judge the one results file given against the median of recent runs of the same GPU model in the results store."),
    last: int = typer.Option(5, "--last", help="With --against-store: how many recent runs make the baseline."),
    store: Path = typer.Option(None, "--store", help="Results store (default: reports/bwbench-history.sqlite)."),
):
    """CI gate: exit 1 when a record of CURRENT is really slower than in BASELINE (or, with --against-store, than in recent stored runs).

    A record regresses when its median bandwidth drops by at least --max-drop and a rank test on the raw samples (or disjoint p10-p90 intervals when samples are few) says the difference is real. Records skipped in both runs are left out (and counted). Verdicts: faster, same, slower, ambiguous (past the threshold but within noise, or either run's samples disturbed), missing, new, failed (fails its check now and did not fail it in BASELINE: passed, skipped or absent there), still failing, invalid (a NaN, infinite, negative, zero or absent GB/s), incomplete (absent because CURRENT stopped early). Exit codes: 0 no regression, 1 regression or a newly failed check in CURRENT, or invalid data or a run that stopped early (unless --allow-partial), 2 usage or input error.
    """

    from rich.console import Console

    to_stdout = "-" in (str(markdown_out), str(json_out))  # then the screen's lines, warnings too, go to stderr
    screen = Console(stderr=True, highlight=False, width=console.width) if to_stdout else console

    def judge_runs() -> int:
        from .comparison import build_view, markdown, to_json
        from .console import comparison_output
        from .gate import check_threshold, compare_runs, has_regression, parse_fraction, partial_runs
        from .results import read_document
        from .safe_json import dumps_finite

        threshold = parse_fraction(max_drop)
        check_threshold(threshold)
        smallest = parse_size(min_bytes)
        check_gate_outputs({"--markdown": markdown_out, "--json": json_out}, [p for p in (baseline, current) if p])
        if against_store:
            if current is not None:
                raise UsageError("--against-store takes one results file (the run to judge)")
            docs, note = _store_baseline(baseline, store, last, ignore_timing)
        else:
            note = ""
            if current is None:
                raise UsageError("name two results files (BASELINE CURRENT), or one with --against-store")
            try:
                docs = [read_document(p) for p in (baseline, current)]
            except ValueError as err:
                raise UsageError(str(err)) from None
        for doc, path in ((docs[1], baseline),) if against_store else zip(docs, (baseline, current)):
            _refuse_fleet_file(doc, path)
        comparisons = compare_runs(docs[0], docs[1], threshold, ignore_gpu=ignore_gpu, min_bytes=smallest,
                                   ignore_timing=ignore_timing)
        if not comparisons:
            raise UsageError(f"--min-bytes {min_bytes}: no record of these runs moves that much")
        wanted = split_list(impl, "--impl")
        if wanted:
            known = {c.impl for c in comparisons}
            unknown = [name for name in wanted if name not in known]
            if unknown:
                raise UsageError(f"--impl {', '.join(unknown)}: not in these runs; they have {', '.join(sorted(known))}")
            comparisons = [c for c in comparisons if c.impl in wanted]
            measured = [{(r.suite, r.case, r.dtype, r.impl) for r in d.records} for d in docs]
            if not any((c.suite, c.case, c.dtype, c.impl) in measured[0] & measured[1] for c in comparisons):
                lacking = [name for name, d in (("the baseline", docs[0]), ("the current run", docs[1]))
                           if not any(r.impl in wanted for r in d.records)]
                why = f"{lacking[0]} has no record of it" if lacking else "the runs measured it on no common case"
                raise UsageError(f"--impl {', '.join(wanted)}: {why}, so nothing would be judged; "
                                 "choose implementations both runs measured")
        regression = has_regression(comparisons)
        sources = ((f"the store's last {last} runs" if against_store else str(baseline)),
                   str(baseline if against_store else current))
        view = build_view(docs[0], docs[1], comparisons, threshold, regression, sources)
        if note:
            screen.print(note, markup=False, soft_wrap=True)
        screen.print(comparison_output(view, show_all))
        passed = gate_passes(comparisons, docs[0], docs[1], allow_partial, screen)
        if markdown_out is not None:
            _write_text(markdown_out, markdown(view, show_all))
        if json_out is not None:
            payload = {**to_json(view), "passed": passed, "partial_runs": partial_runs(docs[0], docs[1])}
            _write_text(json_out, dumps_finite(payload, indent=1) + "\n")
        return EXIT_OK if passed else EXIT_FAILED

    raise typer.Exit(_guard(judge_runs, screen))


def _refuse_fleet_file(doc, path) -> None:
    """compare judges one GPU's run against another's; a fleet file holds several GPUs' records of
    the same cases, which would be paired at random. Its run on each GPU is gated by `run --gpus
    ... --baseline`, and `bwbench history` follows each GPU from the store."""
    if len(doc.gpus or []) > 1:
        raise UsageError(f"{path} is a fleet run of {len(doc.gpus)} GPUs; compare takes one GPU's run (gate a fleet "
                         "run with `bwbench run ... --gpus ... --baseline FILE`, or follow each GPU with `bwbench history`)")


def _store_baseline(current_path: Path, store_path: Optional[Path], last: int, ignore_timing: bool = False):
    """([baseline made of the last runs of the same GPU model (timed the same way) in the store, the
    current run], a line saying which)."""
    from .method import run_method
    from .results import read_document
    from .store import DEFAULT_STORE, StoreError, baseline_from_store, run_id_of

    if last < 1:
        raise UsageError(f"--last takes a number of runs, at least 1 (got {last})")
    try:
        current_doc = read_document(current_path)
    except ValueError as err:
        raise UsageError(str(err)) from None
    gpu = current_doc.environment.get("gpu_name")
    try:
        base, runs = baseline_from_store(store_path or DEFAULT_STORE, gpu, last, exclude_run=run_id_of(current_doc),
                                         method=None if ignore_timing else run_method(current_doc))
    except StoreError as err:
        raise UsageError(str(err)) from None
    note = (f"baseline: median of {len(runs)} stored runs on {gpu} "
            f"({', '.join((r.created or '?')[:10] + ' ' + (r.git_commit or '?')[:7] for r in runs)})")
    return [base, current_doc], note


store_app = typer.Typer(help="The results store: every run's records in one SQLite file, for history and gates.",
                        no_args_is_help=True)
app.add_typer(store_app, name="store")


@store_app.command("import")
def store_import(
    files: List[Path] = typer.Argument(..., help="Results JSON files to add."),
    store: Path = typer.Option(None, "--store", help="Results store (default: reports/bwbench-history.sqlite)."),
):
    """Add earlier results files to the store (adding the same run twice adds nothing)."""

    def add() -> None:
        from .store import DEFAULT_STORE, StoreError, import_files

        target = store or DEFAULT_STORE
        try:  # every file read before any is added: a bad one leaves the store as it was
            added = import_files(files, target)
        except (StoreError, ValueError) as err:
            raise UsageError(str(err)) from None
        for path, result in added:
            what = "new run" if result.new_run else "run already stored"
            if result.gpus != 1:  # a fleet file: a run per GPU
                what = f"{result.gpus} GPU runs" + ("" if result.new_run else ", already stored")
            console.print(f"{path}: {what} ({result.gpu_name}, {result.created}), {result.added_records} records added",
                          markup=False, soft_wrap=True)
        console.print(f"store: {target}", markup=False)

    _guard(add)


@app.command()
def history(
    suite: str = typer.Argument(..., help="Suite whose history to show."),
    case: List[str] = typer.Option([], "--case", "-c", help="A case id (rows=4096,cols=1024) or an axis selection (cols=1024); repeatable. Default: every case, as a geometric mean."),
    impl: Optional[str] = list_option(None, "--impl", "-i", help="Comma-separated implementations (default: all)."),
    dtype: Optional[str] = list_option(None, "--dtype", "-d", help="Comma-separated dtypes (default: all)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Only runs on this GPU model (its full name, e.g. 'NVIDIA H100 80GB HBM3')."),
    store: Path = typer.Option(None, "--store", help="Results store (default: reports/bwbench-history.sqlite)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Also write the trend as an HTML chart to this file."),
):
    """A suite's bandwidth over commits and dates, from the results store: a table, and a chart with -o."""

    def show() -> None:
        from rich.table import Table
        from rich.text import Text

        from .history import cell_text, short_commit, trend_rows, write_trend_html
        from .method import short_method
        from .store import DEFAULT_STORE, StoreError, known_values, query_trend, select_points

        target = store or DEFAULT_STORE
        if output is not None:  # never the store it reads, a results file or another store
            check_report_output(output, [target])
        try:
            impls_given, dtypes_given = split_list(impl, "--impl"), split_list(dtype, "--dtype")
            stored = query_trend(target, suite)  # read once: filtered here, and whole for what matched nothing
            if not stored:
                suites = known_values(target, "suite")
                raise UsageError(f"no runs of {suite!r} in {target}; it holds {', '.join(suites) or 'nothing'}")
            points = select_points(stored, case, impls_given, dtypes_given, gpu)
            miss = _history_miss(stored, suite, case, impls_given, dtypes_given, gpu)
            if miss or not points:  # a name no stored run has is a typo, even beside names that match
                raise UsageError(miss or f"no stored record of {suite} has all of these at once "
                                         "(--case/--impl/--dtype/--gpu): leave one out to see what it has")
        except StoreError as err:
            raise UsageError(str(err)) from None
        rows, impls = trend_rows(points)
        several = len({(p.case, p.dtype) for p in points}) > 1
        selection = f"{suite}" + (f" · {', '.join(case)}" if case else " · every case") + \
            (f" · {dtype}" if dtype else "") + (f" · {gpu}" if gpu else "")
        table = Table(title=Text(f"{selection}: GB/s (% of copy)" + (", geometric mean over cases (×N)" if several else "")),
                      title_justify="left")
        for col in ("date", "commit", "GPU", "timed", *impls):
            table.add_column(Text(col), justify="right" if col in impls else "left")
        for r in rows:
            table.add_row(Text((r.created or "—")[:16]), Text(short_commit(r.git_commit)), Text(r.gpu_name or "—"),
                          Text(short_method(r.timing)), *(Text(cell_text(r.cells.get(i), several)) for i in impls))
        console.print(table)
        if len({r.timing for r in rows if r.timing}) > 1:  # a run with no timed record is no other method
            console.print("these runs were timed differently (timed: +wb = write-back charged, README's \"Reading "
                          "the numbers\"): a step where that changes is the method's, not the kernels'",
                          markup=False, soft_wrap=True)
        if output is not None:
            require_plotly()
            kinds = {p.impl: p.kind or "" for p in points}
            write_trend_html(output, f"bwbench history: {suite}", rows, impls, kinds, selection, several)
            console.print(f"trend: {output}", markup=False)

    _guard(show)


def _history_miss(points, suite: str, cases: list[str], impls: list[str], dtypes: list[str],
                  gpu: Optional[str]) -> Optional[str]:
    """Which of history's filters matched none of the suite's stored records, and what the store
    holds for it instead: "matches nothing" alone left the user to guess which option was wrong."""
    from .store import case_matches

    def listed(values) -> str:
        values = sorted({v for v in values if v})
        return ", ".join(values[:12]) + (f" (and {len(values) - 12} more)" if len(values) > 12 else "")

    for option, given, have in (("--impl", impls, [p.impl for p in points]), ("--dtype", dtypes, [p.dtype for p in points]),
                                ("--gpu", [gpu] if gpu else [], [p.gpu_name for p in points])):
        held = set(have)
        missing = [v for v in given if v not in held]
        if missing:
            return f"{option} {','.join(missing)}: no stored run of {suite} has it; the store holds {listed(have)}"
    for selection in cases:
        if not any(case_matches(p, selection) for p in points):
            return (f"--case {selection}: no stored case of {suite} matches; give a case id or an axis=value of "
                    f"one, e.g. {listed(p.case for p in points)}")
    return None


def _write_text(target: Path, text: str) -> None:
    from .outputs import write_text

    if str(target) == "-":
        print(text, end="")
    else:
        write_text(target, text)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
