"""`bwbench run SUITES --gpus ... | --scheduler ...`: the fleet run as the command line shows it."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rich.markup import escape

from . import FleetUnavailable, require_dask
from .request import GpuSelectionError, RunRequest, choose_gpus, parse_gpu_selection, visible_gpus

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass
class FleetOptions:
    """The command line's fleet options."""

    gpus: str | None = None
    scheduler: str | None = None
    fail_on_outlier: bool = False
    outlier_threshold: str = "5%"


@dataclass
class FleetOutput:
    """Where the merged results go and what else is written."""

    out: Path
    name: str | None = None
    report: bool = True
    force: bool = False
    """Replace the files of an existing --name (as `bwbench run --force`)."""
    store: Path | None = None
    """The results store the finished run is added to, a run per GPU (None: --no-store)."""


def suite_reference(suite) -> str:
    """How a worker finds a suite: by name where its own registry knows it (bwbench's suites, the
    entry points, BWBENCH_SUITES_PATH: the same on every host of an install), else by its file."""
    from ..discovery import registry

    known = registry().get(suite.name)
    same = known is not None and getattr(known, "source", None) == suite.source
    return suite.name if same or suite.source is None else suite.source


def request_from_plans(plans, impls: list[str], dtypes: list[str], axes: dict[str, list[str]], **how) -> RunRequest:
    """The request every GPU runs, from the command line's choices (already checked against the suites)."""
    return RunRequest(suites=tuple(suite_reference(p.suite) for p in plans), impls=tuple(impls), dtypes=tuple(dtypes),
                      axes={name: list(values) for name, values in axes.items()}, **how)


def _threshold(text: str) -> float:
    from ..gate import GateInputError, parse_fraction

    try:
        value = parse_fraction(text)
    except GateInputError as err:
        raise GpuSelectionError(f"--outlier-threshold: {err}") from None
    if not 0 < value < 1:
        raise GpuSelectionError(f"--outlier-threshold takes a fraction between 0 and 100% (got {text!r})")
    return value


def check_fleet_options(options: FleetOptions) -> tuple[str | list[int] | None, float]:
    """Everything about the fleet options that can be wrong, found before any GPU work."""
    selection, threshold = check_fleet_choices(options)
    require_dask()
    return selection, threshold


def check_fleet_choices(options: FleetOptions) -> tuple[str | list[int] | None, float]:
    """The values of --gpus, --scheduler and --outlier-threshold (Dask not needed: `--dry-run` checks
    them too)."""
    selection = parse_gpu_selection(options.gpus) if options.gpus is not None else None
    if options.scheduler is not None and selection not in (None, "all"):
        raise GpuSelectionError("--gpus picks GPUs of this host; with --scheduler every GPU worker of the cluster "
                                "runs (start workers only on the GPUs you want)")
    if options.scheduler is not None and not options.scheduler.strip():
        raise GpuSelectionError("--scheduler takes an address such as tcp://HOST:8786")
    return selection, _threshold(options.outlier_threshold)


def run_fleet(request: RunRequest, options: FleetOptions, output: FleetOutput, run_options: dict[str, Any],
              suites: dict[str, Any], console, records_per_gpu: int | None = None,
              apply_gates: Callable[[Any], bool] | None = None, client=None) -> int:
    """Run the request on every GPU, write one merged document, print each GPU's tables and the fleet's
    health. Exit code: 0; 1 for a failed check, a lost or failed GPU, a failed gate, or an outlier with
    --fail-on-outlier; 2 for bad options or no Dask; 130 after Ctrl-C (what was measured is kept)."""
    try:
        selection, threshold = check_fleet_options(options)
        chosen = None if options.scheduler or client is not None else choose_gpus(selection or "all", visible_gpus())
    except (GpuSelectionError, FleetUnavailable) as err:
        console.print(f"[bold red]error:[/] {escape(str(err))}", soft_wrap=True)
        return EXIT_USAGE
    from ..outputs import make_folder, results_stem

    default = f"{'-'.join(suites) or 'fleet'}-fleet-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    stem = results_stem(output.out, output.name, default, output.force, ())
    made_folder = not output.out.exists()
    make_folder(output.out)
    paths = {ext: output.out / f"{stem}.{ext}" for ext in ("json", "csv", "html")}
    options_record = {**run_options, "fleet": {"gpus": options.gpus, "scheduler": options.scheduler,
                                               "outlier_threshold": threshold}}
    from .merge import FleetResults

    results = FleetResults(paths["json"], options_record, suites, replace=output.force)
    try:
        collector = _collect(request, chosen, options.scheduler, client, results, console, records_per_gpu)
    except _StartFailed as err:
        console.print(f"[bold red]error:[/] {escape(str(err))}", soft_wrap=True)
        _leave_no_folder(output.out, made_folder)
        return EXIT_USAGE
    if collector is None and not results.reported:  # Ctrl-C while the cluster was starting
        console.print("[yellow]interrupted[/] before any GPU reported: nothing measured, no file written")
        _leave_no_folder(output.out, made_folder)
        return EXIT_INTERRUPTED
    interrupted = collector is None or collector.interrupted
    return _conclude(results, collector, interrupted, threshold, options, output, paths, console, apply_gates)


def _leave_no_folder(folder: Path, made: bool) -> None:
    """Nothing ran, so nothing was written (the results file comes with a GPU's first news): a folder
    this run made goes again."""
    if made:
        try:
            folder.rmdir()
        except OSError:  # something else is in it now
            pass


class _StartFailed(Exception):
    """The fleet could not start: no scheduler there, or no GPU worker."""


def _collect(request, chosen, scheduler, client, results, console, records_per_gpu):
    """Run the collector under a progress bar; None when Ctrl-C came before it started."""
    from contextlib import nullcontext

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .cluster import SchedulerUnreachable, fleet_client
    from .collect import FleetCollector, NoGpuWorkers
    from .exits import watching_worker_exits

    where = scheduler or f"a local cluster of {len(chosen)} GPU worker(s)"
    try:
        with (nullcontext(client) if client is not None else fleet_client(chosen, scheduler)) as dask_client:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console, transient=True) as progress:
                sink = _ShowingSink(results, progress, console, records_per_gpu)
                console.print(f"fleet run on {where}")
                with watching_worker_exits() as exits:
                    collector = FleetCollector(dask_client, request, sink, exit_reason=exits.reason_for)
                    collector.run()
                return collector
    except (SchedulerUnreachable, NoGpuWorkers) as err:
        raise _StartFailed(str(err)) from None
    except KeyboardInterrupt:
        return None


class _ShowingSink:
    """The merged results' sink, plus a progress bar per GPU and a line the moment a worker is lost."""

    def __init__(self, results, progress, console, records_per_gpu):
        self.results, self.progress, self.console, self.total = results, progress, console, records_per_gpu
        self.bars: dict[str, Any] = {}
        self.uuids: dict[str, str] = {}
        """GPU UUID -> the worker that reported it first."""

    def _bar(self, run):
        if run.slot not in self.bars:
            self.bars[run.slot] = self.progress.add_task(run.slot, total=self.total)
        return self.bars[run.slot]

    def environment(self, run) -> None:
        self.results.environment(run)
        self.progress.update(self._bar(run), description=_who(run))
        uuid = (run.environment or {}).get("gpu_uuid")
        twin = self.uuids.setdefault(uuid, run.slot) if uuid else run.slot
        if twin != run.slot:  # a worker started without its own CUDA_VISIBLE_DEVICES
            self.console.print(f"[bold yellow]warning:[/] workers {escape(twin)} and {escape(run.slot)} measure the same "
                               f"GPU ({escape(str(uuid))}): they share it, so both measure less than it can do and "
                               "their records are not told apart; give each worker its own GPU "
                               "(CUDA_VISIBLE_DEVICES)", soft_wrap=True)

    def records(self, run, rows) -> None:
        self.results.records(run, rows)
        self.progress.advance(self._bar(run), len(rows))

    def idle(self) -> None:
        self.results.idle()

    def quiet(self, run, seconds) -> None:
        self.results.quiet(run, seconds)
        case = run.current
        if case:
            doing = f"still in {case['suite']} {case['case']} {case['dtype']}"
        elif run.environment:
            doing = "between cases"
        else:
            doing = "its GPU has not reported yet (still opening it, or its worker is busy with another task)"
        self.console.print(f"[yellow]no news[/] from {escape(_who(run))} for {seconds:.0f} s: {escape(doing)}; "
                           "Ctrl-C stops the run and keeps what was measured", soft_wrap=True)

    def changed(self, run) -> None:
        from .collect import RESTARTING

        self.results.changed(run)
        if run.status == RESTARTING:
            lost = run.lost_cases[-1] if run.lost_cases else None
            where = f"{lost['suite']} {lost['case']} {lost['dtype']} lost" if lost else "no case lost"
            self.console.print(f"[bold red]lost[/] {escape(_who(run))}: {escape(str(run.error))}; {escape(where)}; waiting for its worker "
                               "to come back", soft_wrap=True)


def _who(run) -> str:
    env = run.environment or {}
    if not env:
        return f"worker {run.slot}"
    return f"GPU {env.get('gpu_index')} ({env.get('gpu_name')}, {env.get('gpu_uuid')}, {env.get('host')})"


def _conclude(results, collector, interrupted, threshold, options, output, paths, console, apply_gates) -> int:
    from ..console import problems, summary_tables
    from ..results import write_csv
    from .health import assess
    from .merge import per_gpu_documents

    document = results.document
    health = assess([g.get("environment") for g in document.gpus or []], document.records, threshold)
    results.finish(interrupted=interrupted, health=health.to_dict())
    write_csv(document, paths["csv"])
    from ..store import add_finished_run

    if note := add_finished_run(paths["json"], output.store):
        console.print(note, markup=False, soft_wrap=True)
    parts = per_gpu_documents(document)
    for label, part in parts:
        console.rule(escape(label))
        for table in summary_tables(part.records):
            console.print(table)
        for line in problems(part.records):
            console.print(line, soft_wrap=True)
    if health.gpus:
        console.print(health_table(health))
    lost = _print_losses(document, console)
    if output.report and document.records:
        from ..cli import ReportUnavailable, write_html_report

        try:
            write_html_report(parts, paths["html"])
            console.print(f"report:  {paths['html']}")
        except ReportUnavailable as err:
            console.print(f"[yellow]warning:[/] {err}", soft_wrap=True)
    console.print(f"results: {paths['json']} (CSV: {paths['csv']}); {len(document.records)} records from "
                  f"{len(parts)} GPU(s)")
    if interrupted:
        console.print(f"[yellow]interrupted[/]: {len(document.records)} records kept in {paths['json']}")
        return EXIT_INTERRUPTED
    gates_passed = all(apply_gates(part) for _label, part in parts) if apply_gates else True
    failed = any(r.status == "failed" for r in document.records)
    if health.outliers and options.fail_on_outlier:
        console.print(f"[bold red]--fail-on-outlier[/]: {len(health.outliers)} GPU(s) more than "
                      f"{threshold:.0%} below the fleet median")
        return EXIT_FAILED
    return EXIT_FAILED if failed or lost or not gates_passed else EXIT_OK


def health_table(health):
    from rich.table import Table

    title = (f"fleet health: a GPU more than {health.threshold:.0%} below the fleet median is an outlier"
             if health.compared else "fleet health: fewer than two GPUs measured, nothing to compare with")
    table = Table(title=title, title_justify="left")
    for col, justify in (("GPU", "left"), ("host", "left"), ("UUID", "left"), ("copy GB/s", "right"),
                         ("vs median", "right"), ("optimized % of copy (vs median)", "left"), ("verdict", "left")):
        table.add_column(col, justify=justify)
    for gpu in health.gpus:
        impls = escape("\n".join(f"{i.suite} {i.impl}: {i.pct_copy_median:.0f}% ({i.vs_fleet - 1:+.1%})" for i in gpu.impls))
        verdict = "[bold red]OUTLIER[/]: " + escape("; ".join(gpu.reasons)) if gpu.outlier else "[green]ok[/]"
        table.add_row(str(gpu.gpu_index), escape(str(gpu.host)), escape(str(gpu.gpu_uuid)),
                      "—" if gpu.copy_gbps is None else f"{gpu.copy_gbps:,.0f}",
                      "—" if gpu.copy_vs_fleet is None else f"{gpu.copy_vs_fleet - 1:+.1%}", impls or "—", verdict)
    return table


def _print_losses(document, console) -> bool:
    """One line per GPU whose part did not finish, and per case it lost; True when any did."""
    any_lost = False
    for gpu in document.gpus or []:
        if gpu["status"] in ("done", "stopped") and not gpu["lost_cases"]:
            continue
        who = (f"GPU {gpu['gpu_index']} ({gpu['gpu_uuid']}, {gpu['host']}, worker {gpu['worker']})"
               if gpu["environment"] else f"worker {gpu['worker']} (its GPU never reported)")
        if gpu["status"] in ("lost", "failed") or gpu["status"] == "done":
            any_lost = True  # a case lost to a dying worker, even where the restarted worker finished the rest
        console.print(f"[bold red]{gpu['status']}[/] {escape(who)}: {escape(str(gpu['error'] or 'stopped'))}; "
                      f"{gpu['records']} records kept"
                      + (f", {gpu['restarts']} restart(s)" if gpu["restarts"] else ""), soft_wrap=True)
        for case in gpu["lost_cases"]:
            console.print(escape(f"  lost case: {case['suite']} {case['case']} {case['dtype']} ({case['reason']})"),
                          soft_wrap=True)
    return any_lost
