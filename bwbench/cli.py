"""The `bwbench` command line: run, list, info, report.

Exit codes: 0 success; 1 an implementation failed its check or errored (its record says why);
2 usage or input error, or no GPU; 130 interrupted (the results measured so far are kept).
"""

from __future__ import annotations

import datetime as _dt
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import typer

from .console import comparison_table, device_table, make_console, problems, summary_tables

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

app = typer.Typer(
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


class UsageError(Exception):
    """Bad input from the user: printed as a message, exit code 2."""


def fail(message: str, code: int = EXIT_USAGE) -> None:
    console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    raise typer.Exit(code)


class ReportUnavailable(UsageError):
    """The HTML report needs plotly, which is not importable here."""


def write_html_report(documents, target: Path) -> None:
    """write_report, with a missing plotly turned into ReportUnavailable (a message, not a traceback)."""
    import importlib

    try:
        importlib.import_module("plotly")
    except ImportError as err:
        raise ReportUnavailable(
            f"no HTML report: plotly is not importable here ({err}); `pip install plotly`, or build the "
            "report on another machine with `bwbench report RESULTS.json`") from None
    from .report import write_report

    write_report(documents, target)


def split_list(value: Optional[str]) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


_SIZE = re.compile(r"^\s*([0-9.]+(?:e[0-9]+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'4GB' -> 4e9, '512MiB' -> 512 * 2**20, '1000' -> 1000 bytes."""
    match = _SIZE.match(text)
    if not match:
        raise UsageError(f"cannot read {text!r} as a size (examples: 4GB, 512MiB, 1e9)")
    number, unit = float(match.group(1)), (match.group(2) or "").lower().rstrip("b")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
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
        selected[name.strip()] = split_list(values)
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
                raise UsageError(f"{token} needs values, e.g. {token} 1024,4096")
            name, values = token[2:], extra[i + 1]
            i += 2
        selected[name.replace("-", "_")] = split_list(values) if ";" not in values else \
            [v.strip() for v in values.split(";") if v.strip()]
    return selected


def _guard(fn):
    """Turn the errors a user can cause into a message and an exit code instead of a traceback."""
    from .device import NoGpuError
    from .gate import GateInputError
    from .profile import ProfilerUnavailable
    from .suite import SelectionError, SuiteDefinitionError

    try:
        return fn()
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


def _default_stem(suite: str, gpu_name: str) -> str:
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", gpu_name).strip("-").lower() or "gpu"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{suite}-{gpu}-{stamp}"


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    suite: str = typer.Argument(..., help="Suite to run (see `bwbench list`); several as a comma-separated list, or `all`, go into one results file."),
    dtype: Optional[str] = typer.Option(None, "--dtype", "-d", help="Comma-separated dtypes, e.g. float16,bfloat16 (default: the suite's default)."),
    impl: Optional[str] = typer.Option(None, "--impl", "-i", help="Comma-separated implementations (default: all). The copy ceiling is always measured."),
    axis: List[str] = typer.Option([], "--axis", "-a", help="Axis values NAME=V1,V2 (repeatable). Shorthand: --NAME V1,V2, e.g. --cols 1024,4096."),
    quick: bool = typer.Option(False, "--quick", help="A smoke sweep of a few small shapes."),
    timing: str = typer.Option("cold", "--timing", help="cold: L2 flushed before every sample (default); hot: back-to-back launches replayed from a CUDA graph."),
    max_time: float = typer.Option(1.0, "--max-time", help="Seconds of sampling per measurement before giving up on the noise target."),
    noise: float = typer.Option(0.002, "--noise", help="Stop sampling once the median's relative standard error is below this (after --min-samples)."),
    min_samples: int = typer.Option(20, "--min-samples", help="Samples taken before the noise target can stop sampling."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs (each case gets seed + its number)."),
    out: Path = typer.Option(Path("reports"), "--out", "-o", help="Folder for the results JSON, CSV and HTML report."),
    name: Optional[str] = typer.Option(None, "--name", help="File name stem (default SUITE-GPU-TIMESTAMP)."),
    report: bool = typer.Option(True, "--report/--no-report", help="Write the HTML report at the end."),
    gpu: int = typer.Option(0, "--gpu", help="CUDA device index."),
    copy_size: str = typer.Option("4GB", "--copy-size", help="Buffer size of the device copy-bandwidth measurement."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="Gate: a results file to compare with at the end; exit 1 on a real regression."),
    max_drop: str = typer.Option("5%", "--max-drop", help="Gate threshold for --baseline (5% or 0.05)."),
    min_copy_fraction: Optional[float] = typer.Option(None, "--min-copy-fraction", help="Gate: exit 1 when an implementation run reaches less than this fraction of the same-run copy bandwidth (e.g. 0.9 with --impl optimized)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="Fleet run: `all` or 0,1,... GPUs of this host, one Dask worker each, merged into one results file with a health check (needs bwbench[fleet])."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Fleet run on every GPU worker (--resources GPU=1) of the Dask scheduler at this address, e.g. tcp://HOST:8786."),
    fail_on_outlier: bool = typer.Option(False, "--fail-on-outlier", help="Fleet run: exit 1 when a GPU is more than --outlier-threshold below the fleet median."),
    outlier_threshold: str = typer.Option("5%", "--outlier-threshold", help="Fleet run: how far below the fleet median (copy bandwidth, optimized % of copy) flags a GPU."),
):
    """Sweep a suite (or several, or `all`): check every implementation against the reference, time it, write results and a report.

    Axis values can be chosen with --NAME VALUES (e.g. --cols 1024,4096 --rows 4096) or --axis NAME=VALUES.
    Results go to OUT/NAME.json (written after every record, so an interrupted run keeps what it measured), OUT/NAME.csv and OUT/NAME.html.
    """
    from .runner import RunSettings
    from .stats import SamplingPolicy
    from .timing import TIMING_MODES

    def prepare():
        from .discovery import get_suite

        if timing not in TIMING_MODES:
            raise UsageError(f"--timing must be one of {', '.join(TIMING_MODES)}, not {timing!r}")
        if max_time <= 0 or noise <= 0 or min_samples < 1:
            raise UsageError("--max-time and --noise must be positive and --min-samples at least 1")
        plans = []
        axis_args = parse_axis_args(list(ctx.args), axis)
        for suite_name in _suite_names(suite):
            chosen = get_suite(suite_name)
            impls = chosen.select_impls(split_list(impl))
            axis_values = {name_: chosen.parse_axis_values(name_, values) for name_, values in axis_args.items()}
            plans.append(SuitePlan(chosen, impls, chosen.cases(split_list(dtype), axis_values, quick=quick)))
        gates = _prepare_gates(baseline, max_drop, min_copy_fraction)
        return plans, parse_size(copy_size), gates

    plans, copy_bytes, gates = _guard(prepare)
    if gpus is not None or scheduler is not None:  # many GPUs through Dask (bwbench/fleet)
        from .fleet.command import FleetOptions, FleetOutput, request_from_plans, run_fleet

        request = request_from_plans(plans, split_list(impl), split_list(dtype), parse_axis_args(list(ctx.args), axis),
                                     quick=quick, timing=timing, max_time=max_time, noise=noise,
                                     min_samples=min_samples, seed=seed, copy_bytes=copy_bytes)
        raise typer.Exit(_guard(lambda: run_fleet(
            request, FleetOptions(gpus, scheduler, fail_on_outlier, outlier_threshold), FleetOutput(out, name, report),
            {"suite": suite, "dtype": dtype, "impl": impl, "axes": request.axes, "quick": quick, "timing": timing,
             "max_time": max_time, "noise": noise, "min_samples": min_samples, "seed": seed, "argv": sys.argv[1:]},
            {p.suite.name: p.suite.describe() for p in plans}, console,
            records_per_gpu=sum(len(p.cases) * (len(p.impls) + 1) for p in plans),
            apply_gates=lambda part: _apply_gates(gates, part))))
    code = _guard(lambda: _run_measured(
        plans, copy_bytes,
        RunSettings(timing=timing, seed=seed),
        SamplingPolicy(min_samples=min_samples, max_median_error=noise, max_seconds=max_time),
        out, name, report, gpu, gates,
        options={"suite": suite, "dtype": dtype, "impl": impl, "axes": parse_axis_args(list(ctx.args), axis),
                 "quick": quick, "timing": timing, "max_time": max_time, "noise": noise,
                 "min_samples": min_samples, "seed": seed, "argv": sys.argv[1:]}))
    raise typer.Exit(code)


@dataclass
class SuitePlan:
    """One suite of a run: its implementations and cases, chosen before any GPU work."""

    suite: object
    impls: list
    cases: list


def _suite_names(argument: str) -> list[str]:
    """`all` -> every suite that loads; otherwise the comma-separated names, in order."""
    if argument.strip() == "all":
        from .discovery import BrokenSuite, discover

        return [name for name, entry in discover().items() if not isinstance(entry, BrokenSuite)]
    names = split_list(argument) or []
    if not names:
        raise UsageError("name a suite (see `bwbench list`), several separated by commas, or `all`")
    return list(dict.fromkeys(names))


def _measure_device_copy(timer, info) -> None:
    """The device copy bandwidth the environment records (faster of memcpy and a copy kernel)."""
    from .timing import measure_copy_ceiling

    ceiling = measure_copy_ceiling(timer, info.copy_bytes)
    info.copy_gbps, info.copy_gbps_by_method = ceiling.gbps, ceiling.gbps_by_method


@dataclass
class Gates:
    """The checks a CI job asks of a run, applied to its records once it ends."""

    baseline: object | None = None
    max_drop: float = 0.05
    min_copy_fraction: float | None = None


def _prepare_gates(baseline: Optional[Path], max_drop: str, min_copy_fraction: Optional[float]) -> Gates:
    """Read the baseline up front, so a bad gate argument fails before any GPU time is spent."""
    from .gate import parse_fraction
    from .results import read_document

    gates = Gates(max_drop=parse_fraction(max_drop), min_copy_fraction=min_copy_fraction)
    if min_copy_fraction is not None and not 0 < min_copy_fraction <= 1.5:
        raise UsageError(f"--min-copy-fraction takes a fraction such as 0.9 (got {min_copy_fraction})")
    if baseline is not None:
        try:
            gates.baseline = read_document(baseline)
        except ValueError as err:
            raise UsageError(f"--baseline: {err}") from None
    return gates


def _apply_gates(gates: Gates, document) -> bool:
    """Print each gate's verdict; True when every gate passed."""
    from .gate import compare_runs, copy_fraction_violations, has_regression

    passed = True
    if gates.baseline is not None:
        comparisons = compare_runs(gates.baseline, document, gates.max_drop)
        console.print(comparison_table(comparisons, gates.max_drop))
        passed &= not has_regression(comparisons)
    if gates.min_copy_fraction is not None:
        violations = copy_fraction_violations(document, gates.min_copy_fraction)
        for v in violations:
            got = "failed" if v.pct_copy is None else f"{v.pct_copy:.1f}%"
            console.print(f"[bold red]below floor[/] {v.suite} {v.case} {v.dtype} {v.impl}: {got} of copy "
                          f"(needs {v.required_pct:.0f}%)", soft_wrap=True)
        if not violations:
            console.print(f"[green]every implementation at or above {gates.min_copy_fraction:.0%} of copy[/]")
        passed &= not violations
    return passed


def _run_measured(plans, copy_bytes, settings, policy, out, name, want_report, gpu, gates, options) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .device import query_device, require_cuda
    from .results import ResultsWriter, RunDocument, write_csv
    from .runner import Runner
    from .telemetry import Telemetry
    from .timing import Timer

    device = require_cuda(gpu)
    info = query_device(device)
    for plan in plans:
        console.print(f"[bold]{plan.suite.name}[/]: {len(plan.cases)} cases × {len(plan.impls)} implementations "
                      f"+ copy ceiling on {info.gpu_name}")
    timer = Timer(device, info.l2_bytes, info.sm_clock_max_mhz, policy)
    with console.status("measuring the device copy bandwidth…"):
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        info.copy_bytes = min(copy_bytes, free // 4)
        _measure_device_copy(timer, info)
    label = plans[0].suite.name if len(plans) == 1 else ("all" if options.get("suite") == "all" else "suites")
    stem = name or _default_stem(label, info.gpu_name)
    out.mkdir(parents=True, exist_ok=True)
    paths = {ext: out / f"{stem}.{ext}" for ext in ("json", "csv", "html")}
    document = RunDocument(environment=info.to_dict(), options=options,
                           suites={plan.suite.name: plan.suite.describe() for plan in plans})

    interrupted = False
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("starting", total=sum(len(p.cases) * (len(p.impls) + 1) for p in plans))
        writer = ResultsWriter(paths["json"], document, on_add=lambda rec: progress.advance(task))
        runner = Runner(device, timer, writer, settings, info.peak_gbps, Telemetry(info.gpu_uuid, info.gpu_index),
                        on_step=lambda text: progress.update(task, description=text))
        try:
            for plan in plans:
                for case in plan.cases:
                    runner.run_case(plan.suite, case, plan.impls)
        except KeyboardInterrupt:
            interrupted = True
    writer.finish(interrupted=interrupted)
    write_csv(document, paths["csv"])
    for table in summary_tables(document.records):
        console.print(table)
    for line in problems(document.records):
        console.print(line, soft_wrap=True)
    console.print(f"device copy bandwidth {info.copy_gbps:,.0f} GB/s"
                  + (f", theoretical peak {info.peak_gbps:,.0f} GB/s" if info.peak_gbps else ""))
    if want_report and document.records:
        try:  # the results are written; a missing plotly costs only the page
            write_html_report([(info.gpu_name, document)], paths["html"])
            console.print(f"report:  {paths['html']}")
        except ReportUnavailable as err:
            console.print(f"[yellow]warning:[/] {err}", soft_wrap=True)
    console.print(f"results: {paths['json']} (CSV: {paths['csv']})")
    if interrupted:
        console.print(f"[yellow]interrupted[/]: {len(document.records)} records kept in {paths['json']}")
        return EXIT_INTERRUPTED
    gates_passed = _apply_gates(gates, document)
    failed = any(r.status == "failed" for r in document.records)
    return EXIT_FAILED if failed or not gates_passed else EXIT_OK


@app.command("list")
def list_suites():
    """List the suites, their axes, dtypes and implementations."""
    from rich.table import Table

    from .discovery import BrokenSuite, discover

    table = Table(title="bwbench suites", title_justify="left")
    for col in ("suite", "description", "axes (default sweep)", "dtypes", "implementations"):
        table.add_column(col)
    for name, entry in discover().items():
        if isinstance(entry, BrokenSuite):
            table.add_row(name, f"[red]cannot load: {entry.error}[/]", "", "", "")
            continue
        axes = "\n".join(f"{k}: {', '.join(map(str, v))}" for k, v in entry.describe()["axes"].items())
        dtypes = ", ".join(f"[bold]{d}[/]" if d in entry.default_dtypes else d for d in entry.dtypes)
        impls = "\n".join(f"{i.name} ({i.kind})" for i in entry.implementations.values())
        table.add_row(name, entry.description, axes, dtypes, impls)
    console.print(table)
    console.print("[dim]bold dtype = default; every run also measures the same-size copy ceiling[/]")


@app.command()
def info(
    gpu: int = typer.Option(0, "--gpu", help="CUDA device index."),
    copy_size: str = typer.Option("4GB", "--copy-size", help="Buffer size of the copy-bandwidth measurement."),
    json_out: bool = typer.Option(False, "--json", help="Print the facts as JSON."),
):
    """The GPU, its software, its theoretical peak and its measured copy bandwidth."""

    def measure():
        import json

        import torch

        from .device import query_device, require_cuda
        from .timing import Timer

        nbytes = parse_size(copy_size)
        device = require_cuda(gpu)
        facts = query_device(device)
        timer = Timer(device, facts.l2_bytes, facts.sm_clock_max_mhz)
        free, _ = torch.cuda.mem_get_info(device)
        facts.copy_bytes = min(nbytes, free // 4)
        _measure_device_copy(timer, facts)
        if json_out:
            print(json.dumps(facts.to_dict(), indent=1))
        else:
            console.print(device_table(facts.to_dict()))

    _guard(measure)


@app.command("report")
def report_cmd(
    files: List[Path] = typer.Argument(..., help="Results JSON files (one run, or several to compare)."),
    output: Path = typer.Option(None, "--output", "-o", help="HTML file to write (default: next to the first results file)."),
):
    """Build the HTML report from results files (no GPU needed)."""

    def build():
        from .results import read_document

        documents = []
        for path in files:
            try:
                doc = read_document(path)
            except ValueError as err:
                raise UsageError(str(err)) from None
            label = doc.environment.get("gpu_name") or path.stem
            if len(files) > 1:
                label = f"{label} ({path.stem})"
            documents.append((label, doc))
        target = output or files[0].with_suffix(".html")
        write_html_report(documents, target)
        console.print(f"report: {target}")

    _guard(build)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def profile(
    ctx: typer.Context,
    suite: str = typer.Argument(..., help="Suite to profile (see `bwbench list`)."),
    impl: str = typer.Option(..., "--impl", "-i", help="Comma-separated implementations to profile."),
    case: List[str] = typer.Option([], "--case", "-c", help="Axis value NAME=VALUE (repeatable), e.g. --case cols=4096. Shorthand: --cols 4096. Unnamed axes take the suite's first value."),
    dtype: Optional[str] = typer.Option(None, "--dtype", "-d", help="dtype (default: the suite's default)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    out: Path = typer.Option(Path("reports"), "--out", "-o", help="Folder for the profile's results JSON."),
    gpu: int = typer.Option(0, "--gpu", help="CUDA device index."),
):
    """Nsight Compute on one case: DRAM bytes really moved against the byte model, ncu time against bwbench's.

    Runs the case through the usual check and cold timing, then profiles one call of each implementation under `ncu --clock-control none`, filtered to that call with an NVTX range, summing dram__bytes_read.sum, dram__bytes_write.sum and gpu__time_duration.sum over the kernels it launches. The figures go into a results file (record.extra["profile"]) that `bwbench report` reads.
    """

    def measure() -> int:
        from rich.table import Table

        from .device import query_device, require_cuda
        from .discovery import get_suite
        from .profile import ProfileResult, find_ncu, run_ncu
        from .results import ResultsWriter, RunDocument
        from .runner import Runner, RunSettings
        from .stats import SamplingPolicy
        from .timing import Timer

        chosen = get_suite(suite)
        impls = chosen.select_impls(split_list(impl))
        wanted = parse_axis_args(list(ctx.args), case)
        values = {a: chosen.parse_axis_values(a, v) for a, v in wanted.items()}
        for a, v in values.items():
            if len(v) != 1:
                raise UsageError(f"profile takes one value per axis (got {len(v)} for {a})")
        if chosen.points is None:
            values = {a: values.get(a, [vals[0]]) for a, vals in chosen.axes.items()}
        cases = chosen.cases(split_list(dtype), values)
        if len(cases) > 4:
            raise UsageError(f"that selects {len(cases)} cases; profile one at a time (name every axis)")
        find_ncu()
        device = require_cuda(gpu)
        facts = query_device(device)
        timer = Timer(device, facts.l2_bytes, facts.sm_clock_max_mhz, SamplingPolicy(max_seconds=0.5))
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{_default_stem(chosen.name, facts.gpu_name)}-profile.json"
        document = RunDocument(environment=facts.to_dict(), options={"profile": True, "argv": sys.argv[1:]},
                               suites={chosen.name: chosen.describe()})
        writer = ResultsWriter(path, document)
        runner = Runner(device, timer, writer, RunSettings(seed=seed), facts.peak_gbps)
        table = Table(title=f"{chosen.name}: DRAM bytes measured by Nsight Compute against the byte model")
        for col in ("case", "dtype", "impl", "kernels", "model MB", "DRAM MB", "DRAM / model",
                    "bwbench µs", "ncu µs", "ncu / bwbench"):
            table.add_column(col, justify="left" if col in ("case", "dtype", "impl") else "right")
        for c in cases:
            with console.status(f"checking and timing {c}…"):
                records = runner.run_case(chosen, c, impls)
            for rec in records:
                if rec.impl == "copy":
                    continue
                if rec.status != "ok":
                    table.add_row(c.id, c.dtype, rec.impl, rec.status, "", "", "", "", "", "")
                    continue
                with console.status(f"ncu on {rec.impl} {c}…"):
                    kernels = run_ncu(chosen.name, rec.impl, dict(c.params), c.dtype, seed, gpu)
                result = ProfileResult(kernels, rec.bytes_total, rec.stats["median_us"])
                rec.extra = {**(rec.extra or {}), "profile": result.to_dict()}
                writer.flush()
                table.add_row(c.id, c.dtype, rec.impl, str(len(kernels)), f"{result.model_bytes / 1e6:,.1f}",
                              f"{result.dram_bytes / 1e6:,.1f}", f"{result.bytes_ratio:.2f}×",
                              f"{result.bwbench_median_us:,.1f}", f"{result.ncu_time_us:,.1f}",
                              f"{result.time_ratio:.2f}" if result.time_ratio else "—")
        writer.finish()
        console.print(table)
        console.print(f"results: {path}")
        return EXIT_OK

    raise typer.Exit(_guard(measure))


@app.command()
def compare(
    baseline: Path = typer.Argument(..., help="Results JSON of the baseline run."),
    current: Path = typer.Argument(..., help="Results JSON of the run to judge."),
    max_drop: str = typer.Option("5%", "--max-drop", help="Smallest drop in median GB/s that counts as a regression (5% or 0.05)."),
    ignore_gpu: bool = typer.Option(False, "--ignore-gpu", help="Compare runs made on different GPU models."),
    markdown_out: Optional[Path] = typer.Option(None, "--markdown", help="Also write a markdown table (for a CI job summary) to this file ('-' for stdout)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the verdicts as JSON to this file ('-' for stdout)."),
    show_all: bool = typer.Option(False, "--all", help="List unchanged records too."),
    impl: Optional[str] = typer.Option(None, "--impl", "-i", help="Comma-separated implementations to judge (default: all); e.g. optimized, so that drift in a baseline library does not fail the gate."),
    min_bytes: str = typer.Option("0", "--min-bytes", help="Leave out records that move fewer bytes, e.g. 64MB: cases of a few microseconds drift between runs by more than --max-drop."),
):
    """CI gate: exit 1 when a record of CURRENT is really slower than in BASELINE.

    A record regresses when its median bandwidth drops by at least --max-drop and a rank test on the raw samples (or disjoint p10-p90 intervals when samples are few) says the difference is real. Verdicts: faster, same, slower, ambiguous (past the threshold but within noise, or either run's samples disturbed), missing, new, failed (fails its check now, passed before), still failing (failed in both runs: reported, not a regression). Exit codes: 0 no regression, 1 regression or a newly failed check in CURRENT, 2 usage or input error.
    """

    def judge_runs() -> int:
        import json

        from .gate import compare_runs, has_regression, markdown, parse_fraction
        from .results import read_document

        threshold = parse_fraction(max_drop)
        smallest = parse_size(min_bytes)
        try:
            docs = [read_document(p) for p in (baseline, current)]
        except ValueError as err:
            raise UsageError(str(err)) from None
        comparisons = compare_runs(docs[0], docs[1], threshold, ignore_gpu=ignore_gpu, min_bytes=smallest)
        if not comparisons:
            raise UsageError(f"--min-bytes {min_bytes}: no record of these runs moves that much")
        wanted = split_list(impl)
        if wanted:
            known = {c.impl for c in comparisons}
            unknown = [name for name in wanted if name not in known]
            if unknown:
                raise UsageError(f"--impl {', '.join(unknown)}: not in these runs; they have {', '.join(sorted(known))}")
            comparisons = [c for c in comparisons if c.impl in wanted]
        console.print(comparison_table(comparisons, threshold, show_all))
        if markdown_out is not None:
            _write_text(markdown_out, markdown(comparisons, threshold))
        if json_out is not None:
            payload = {"max_drop": threshold, "regression": has_regression(comparisons),
                       "comparisons": [c.to_dict() for c in comparisons]}
            _write_text(json_out, json.dumps(payload, indent=1) + "\n")
        return EXIT_FAILED if has_regression(comparisons) else EXIT_OK

    raise typer.Exit(_guard(judge_runs))


def _write_text(target: Path, text: str) -> None:
    if str(target) == "-":
        print(text, end="")
    else:
        target.write_text(text, encoding="utf-8")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
