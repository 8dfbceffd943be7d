"""Fleet runs on CPU: Dask clusters of fake GPU workers (no CUDA anywhere) drive the real fleet code:
the merge, the health verdict, a worker dying mid-run, Ctrl-C, and the command line's errors."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bwbench.fleet.health import assess
from bwbench.fleet.request import (ALL, GpuSelectionError, RunRequest, case_key, choose_gpus,
                                   parse_gpu_selection)
from bwbench.results import Record, read_document

distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (a dependency of distributed)

# Worker processes unpickle the fake GPU by value, whatever their import path.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@dataclass
class FakeGpus:
    """A fake measure function: each worker plays the GPU its name or CUDA_VISIBLE_DEVICES gives.

    copy_gbps / pct_copy per fake GPU index; `die_at` = {gpu: case number} where that GPU's worker
    process exits (a crashed driver, an OOM kill); `hang_at` the same for a worker that is closed
    under a running case."""

    cases: int = 4
    delay_s: float = 0.02
    copy_gbps: dict[int, float] = field(default_factory=dict)
    pct_copy: dict[int, float] = field(default_factory=dict)
    die_at: dict[int, int] = field(default_factory=dict)
    hang_at: dict[int, int] = field(default_factory=dict)
    stall_at: dict[int, int] = field(default_factory=dict)
    uuid_of: dict[int, str] = field(default_factory=dict)
    """A UUID other than GPU-fake-N: two workers on one card."""

    def __call__(self, request, stream):
        from distributed import get_worker

        worker = get_worker()
        token = os.environ.get("CUDA_VISIBLE_DEVICES") if "gpu-" in str(worker.name) else str(worker.name)
        index = int(str(token).rsplit("-", 1)[-1])
        copy = self.copy_gbps.get(index, 3000.0)
        stream.environment({"gpu_index": index, "gpu_uuid": self.uuid_of.get(index, f"GPU-fake-{index}"), "gpu_name": "Fake GPU",
                            "host": "fakehost", "copy_gbps": copy, "peak_gbps": 3350.0,
                            "identity": {"serial": f"S{index}", "pcie_link": {"generation": 5, "width": 16}}})
        for number in range(self.cases):
            stream.check_stop()
            case_id = f"cols={1024 * (number + 1)}"
            if case_key("softmax", case_id, "float32") in request.skip_cases:
                continue
            stream.case_started("softmax", case_id, "float32")
            time.sleep(self.delay_s)
            if self.die_at.get(index) == number:
                os._exit(3)
            while self.stall_at.get(index) == number:
                stream.check_stop()
                time.sleep(0.05)
            if self.hang_at.get(index) == number:
                worker.loop.add_callback(worker.close, executor_wait=False)
                time.sleep(3)
                return
            pct = self.pct_copy.get(index, 90.0) + 0.1 * number
            params = {"rows": 4096, "cols": 1024 * (number + 1)}
            stream.records([
                Record("softmax", case_id, params, "float32", "copy", "ceiling", "ok", gbps=copy, pct_copy=100.0),
                Record("softmax", case_id, params, "float32", "optimized", "cuda", "ok", gbps=copy * pct / 100,
                       copy_gbps=copy, pct_copy=pct),
                Record("softmax", case_id, params, "float32", "torch", "torch", "ok", gbps=copy * 0.5,
                       copy_gbps=copy, pct_copy=50.0 if index else 95.0),
            ])


@contextmanager
def fake_gpu_cluster(count: int):
    """Fake GPU workers fake-0, fake-1, ... in this process (threads): fast to start."""
    from distributed import Client, Scheduler, SpecCluster, Worker

    workers = {f"fake-{i}": {"cls": Worker, "options": {"nthreads": 1, "resources": {"GPU": 1}}}
               for i in range(count)}
    scheduler = {"cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0"}}
    with SpecCluster(workers=workers, scheduler=scheduler) as cluster, Client(cluster) as client:
        if count:
            client.wait_for_workers(count, timeout=30)
        yield client


@pytest.fixture(scope="module")
def three_fake_gpus():
    """Three fake GPUs: enough for a median."""
    with fake_gpu_cluster(3) as client:
        yield client


def _run(client, tmp_path, fake, report=False, **options):
    """One fleet run into tmp_path/fleet.json; a later run in the same test goes to a new folder
    (a run never replaces an existing results file)."""
    from rich.console import Console

    from bwbench.fleet.command import FleetOptions, FleetOutput, run_fleet

    if (tmp_path / "fleet.json").exists():
        tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))
    console = Console(record=True, width=200)
    request = RunRequest(suites=("softmax",), measure=fake)
    code = run_fleet(request, FleetOptions(gpus=None, scheduler="given", **options), FleetOutput(tmp_path, "fleet", report),
                     {"suite": "softmax"}, {"softmax": {}}, console, records_per_gpu=12, client=client)
    return code, read_document(tmp_path / "fleet.json"), console.export_text()


def test_records_of_every_gpu_merge_into_one_document_keyed_by_gpu(three_fake_gpus, tmp_path):
    code, doc, text = _run(three_fake_gpus, tmp_path, FakeGpus())
    assert code == 0, text
    assert doc.complete and not doc.interrupted
    assert len(doc.records) == 3 * 4 * 3
    assert sorted({(r.gpu_index, r.gpu_uuid) for r in doc.records}) == [(i, f"GPU-fake-{i}") for i in range(3)]
    assert [g["gpu_index"] for g in doc.gpus] == [0, 1, 2]
    assert all(g["status"] == "done" and g["environment"]["identity"]["serial"] for g in doc.gpus)
    assert doc.environment["gpu_name"] == "Fake GPU" and "identity" not in doc.environment
    assert doc.health["outliers"] == [] and doc.health["compared"]
    raw = json.loads((tmp_path / "fleet.json").read_text())
    assert raw["records"][0]["gpu_uuid"].startswith("GPU-fake-")
    assert "gpu_uuid" in (tmp_path / "fleet.csv").read_text().splitlines()[0]
    assert "GPU 2 Fake GPU" in text


def test_a_slow_gpu_is_flagged_and_fails_the_run_on_request(three_fake_gpus, tmp_path):
    fake = FakeGpus(copy_gbps={2: 2700.0}, pct_copy={1: 80.0})
    code, doc, text = _run(three_fake_gpus, tmp_path, fake, report=True)
    assert code == 0
    page = (tmp_path / "fleet.html").read_text()  # the report compares the GPUs as runs, outliers named
    assert "GPU 0 Fake GPU" in page and "GPU 2 Fake GPU (outlier)" in page
    assert sorted(doc.health["outliers"]) == ["GPU-fake-1", "GPU-fake-2"]
    by_uuid = {g["gpu_uuid"]: g for g in doc.health["gpus"]}
    assert "copy" in by_uuid["GPU-fake-2"]["reasons"][0]
    assert "softmax optimized" in by_uuid["GPU-fake-1"]["reasons"][0]
    assert not by_uuid["GPU-fake-0"]["outlier"]  # its torch baseline differs, but only "cuda" kinds count
    assert "OUTLIER" in text
    code, _doc, text = _run(three_fake_gpus, tmp_path, fake, fail_on_outlier=True)
    assert code == 1 and "--fail-on-outlier" in text
    code, doc, _text = _run(three_fake_gpus, tmp_path, fake, outlier_threshold="15%")
    assert code == 0 and doc.health["outliers"] == []


def test_health_is_judged_per_case_against_the_fleet_median():
    envs = [{"gpu_index": i, "gpu_uuid": f"u{i}", "copy_gbps": c} for i, c in enumerate([3000, 2990, 2960])]
    recs = [Record("s", f"c{n}", {}, "float16", "opt", "cuda", "ok", pct_copy=p, gpu_uuid=f"u{i}")
            for n in range(3) for i, p in enumerate([90, 91, 84 if n else 91])]
    health = assess(envs, recs, 0.05)
    assert [g.outlier for g in health.gpus] == [False, False, True]
    assert health.gpus[2].impls[0].cases == 3 and health.gpus[2].impls[0].vs_fleet == pytest.approx(84 / 90)
    one = assess(envs[:1], recs[:1], 0.05)
    assert not one.compared and not one.outliers


def test_a_worker_that_dies_loses_only_its_unfinished_case(tmp_path):
    """A real local cluster (a process per fake GPU, pinned by CUDA_VISIBLE_DEVICES): GPU 1's process
    exits in its third case; its nanny restarts it and the sweep goes on there without that case."""
    from rich.console import Console

    from bwbench.fleet.cluster import fleet_client
    from bwbench.fleet.command import FleetOptions, FleetOutput, run_fleet

    fake = FakeGpus(cases=4, delay_s=0.05, die_at={1: 2})
    console = Console(record=True, width=200)
    with fleet_client([(0, "fake-0"), (1, "fake-1")]) as client:
        pinned = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        assert sorted(pinned.values()) == ["fake-0", "fake-1"]
        code = run_fleet(RunRequest(suites=("softmax",), measure=fake), FleetOptions(scheduler="given"),
                         FleetOutput(tmp_path, "loss", False), {}, {"softmax": {}}, console, client=client)
    text = console.export_text()
    doc = read_document(tmp_path / "loss.json")
    assert code == 1, text
    gpu0, gpu1 = doc.gpus
    assert gpu0["status"] == "done" and gpu0["records"] == 12
    assert gpu1["restarts"] == 1 and gpu1["status"] == "done"
    assert [c["case"] for c in gpu1["lost_cases"]] == ["cols=3072"]
    assert sorted({r.case for r in doc.records if r.gpu_index == 1}) == ["cols=1024", "cols=2048", "cols=4096"]
    assert not doc.complete
    assert "lost case: softmax cols=3072 float32" in " ".join(text.split())
    assert re.search(r"its process \d+ exited with status 3", " ".join(text.split())), text  # its nanny's word


def test_how_a_worker_process_ended_is_read_from_its_nannys_log_line():
    import logging

    from bwbench.fleet.exits import watching_worker_exits

    nanny_log = logging.getLogger("distributed.nanny")
    with watching_worker_exits() as exits:
        nanny_log.info("Worker process %d was killed by signal %d", 4242, 9)
        nanny_log.info("Worker process 17 exited with status 3")
        nanny_log.info("Worker process 18 was killed by unknown signal")
        nanny_log.info("Restarting worker (status=running)")
    nanny_log.info("Worker process 19 exited with status 1")  # after the run: not kept
    assert exits.reason_for(4242) == "was killed by signal 9 (SIGKILL)"
    assert exits.reason_for(17) == "exited with status 3"
    assert exits.reason_for(18) == "was killed by an unknown signal"
    assert exits.reason_for(19) is None and exits.reason_for(None) is None


def test_a_worker_that_never_comes_back_is_reported_lost(tmp_path):
    from bwbench.fleet.collect import FleetCollector
    from bwbench.fleet.merge import FleetResults

    results = FleetResults(tmp_path / "gone.json", {}, {})
    request = RunRequest(suites=("softmax",), measure=FakeGpus(cases=3, delay_s=0.05, hang_at={1: 1}))
    with fake_gpu_cluster(2) as client:
        runs = FleetCollector(client, request, results, restart_wait_s=0.5).run()
    results.finish(interrupted=False, health=None)
    by_slot = {r.slot: r for r in runs}
    assert by_slot["fake-1"].status == "lost" and by_slot["fake-1"].lost_cases[0]["case"] == "cols=2048"
    assert by_slot["fake-0"].status == "done"
    doc = read_document(tmp_path / "gone.json")
    assert len([r for r in doc.records if r.gpu_index == 1]) == 3 and not doc.complete


class InterruptAfter:
    """A sink that is Ctrl-C'd after its n-th batch of records."""

    def __init__(self, inner, batches: int):
        self.inner, self.left = inner, batches

    def environment(self, run):
        self.inner.environment(run)

    def changed(self, run):
        self.inner.changed(run)

    def quiet(self, run, seconds):
        self.inner.quiet(run, seconds)

    def idle(self):
        self.inner.idle()

    def records(self, run, rows):
        self.inner.records(run, rows)
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt


def test_ctrl_c_stops_every_worker_and_keeps_what_was_measured(three_fake_gpus, tmp_path):
    from bwbench.fleet.collect import FleetCollector
    from bwbench.fleet.merge import FleetResults

    results = FleetResults(tmp_path / "stop.json", {}, {})
    request = RunRequest(suites=("softmax",), measure=FakeGpus(cases=200, delay_s=0.05))
    collector = FleetCollector(three_fake_gpus, request, InterruptAfter(results, 4))
    runs = collector.run()
    results.finish(interrupted=True, health=None)
    assert collector.interrupted
    assert all(r.status == "stopped" for r in runs)
    assert all(r.future.status == "finished" and r.future.result()["stopped"] for r in runs)  # stopped by the event
    kept = read_document(tmp_path / "stop.json")
    assert kept.interrupted and 12 <= len(kept.records) < 3 * 200 * 3
    assert len(kept.records) == sum(r.records for r in runs)


def _once_handled(signum, send, after_s=1.0, within_s=60.0):
    """A thread that sends `signum` (by `send()`) once the fleet run has taken the signal over and
    `after_s` has passed: a fixed delay alone races the run's start on a loaded machine, and a signal
    that comes before the handler would leave the run going, this test with it. It records whether
    the handler was seen."""
    import signal

    seen, stop = [], threading.Event()
    default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL

    def wait_then_send():
        start = time.monotonic()
        while not stop.is_set() and time.monotonic() - start < within_s:
            if signal.getsignal(signum) is not default and time.monotonic() - start >= after_s:
                seen.append(True)
                send()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=wait_then_send, daemon=True)
    thread.start()
    return seen, stop


def test_ctrl_c_on_the_command_exits_130_with_the_records_written(three_fake_gpus, tmp_path):
    import _thread
    import signal

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("this process was started with Ctrl-C ignored or taken over, which a fleet run leaves alone")
    seen, stop = _once_handled(signal.SIGINT, _thread.interrupt_main)
    try:
        code, doc, text = _run(three_fake_gpus, tmp_path, FakeGpus(cases=400, delay_s=0.1))
    finally:
        stop.set()
    assert seen == [True], "Ctrl-C is handled while the fleet runs"
    assert code == 130, text
    assert doc.interrupted and doc.records and "interrupted" in text


def test_sigterm_on_the_command_stops_the_fleet_as_ctrl_c_does(three_fake_gpus, tmp_path):
    import signal

    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("this process was started with SIGTERM ignored or taken over, which a fleet run leaves alone")
    # as `timeout` or a batch system ends a job; unhandled, it would end pytest too
    seen, stop = _once_handled(signal.SIGTERM, lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        code, doc, text = _run(three_fake_gpus, tmp_path, FakeGpus(cases=400, delay_s=0.1))
    finally:
        stop.set()
    assert seen == [True], "SIGTERM is handled while the fleet runs"
    assert code == 130, text
    assert doc.interrupted and doc.records and "interrupted" in text
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_gpu_selection():
    assert parse_gpu_selection("all") == ALL and parse_gpu_selection(" 0, 2") == [0, 2]
    for bad in ("", "0,x", "1,1", "-1", "0;1", "0,1²"):
        with pytest.raises(GpuSelectionError):
            parse_gpu_selection(bad)
    assert choose_gpus(ALL, ["GPU-a", "GPU-b"]) == [(0, "GPU-a"), (1, "GPU-b")]
    assert choose_gpus([1], ["GPU-a", "GPU-b"]) == [(1, "GPU-b")]
    with pytest.raises(GpuSelectionError, match="has 2 GPU"):
        choose_gpus([2], ["GPU-a", "GPU-b"])


def invoke(*args):
    from bwbench.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize("args,message", [
    (("--gpus", "0,x"), "--gpus takes `all` or GPU numbers"),
    (("--gpus", "²"), "--gpus takes `all` or GPU numbers"),
    (("--gpus", "1,1"), "names a GPU twice"),
    (("--gpus", "0", "--scheduler", "tcp://h:8786"), "with --scheduler every GPU worker"),
    (("--gpus", "all", "--outlier-threshold", "lots"), "--outlier-threshold"),
    (("--gpus", "7"), "this host has 2 GPU(s)"),
])
def test_bad_fleet_options_exit_2_before_any_gpu_work(monkeypatch, args, message):
    monkeypatch.setattr("bwbench.fleet.command.visible_gpus", lambda: ["GPU-a", "GPU-b"])
    code, output = invoke("run", "softmax", "--quick", *args)
    assert code == 2 and message in output and "Traceback" not in output



@pytest.mark.parametrize("args,message", [
    (("--gpus", "foo"), "--gpus takes `all` or GPU numbers"),
    (("--gpus", "all", "--outlier-threshold", "abc"), "--outlier-threshold"),
    (("--scheduler", " "), "--scheduler takes an address"),
])
def test_a_dry_run_checks_the_fleet_options_too(args, message):
    code, output = invoke("run", "softmax", "--quick", "--dry-run", *args)
    assert code == 2 and message in output and "Traceback" not in output


def test_without_dask_the_fleet_options_say_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    monkeypatch.setattr("bwbench.fleet.command.visible_gpus", lambda: pytest.fail("looked for GPUs"))
    for option in (("--gpus", "all"), ("--scheduler", "tcp://127.0.0.1:8786")):
        code, output = invoke("run", "softmax", "--quick", *option)
        assert code == 2 and 'pip install "bwbench[fleet]"' in output, output


def test_a_scheduler_nobody_runs_is_exit_2(monkeypatch, tmp_path):
    monkeypatch.setattr("bwbench.fleet.cluster.CONNECT_TIMEOUT", "1s")
    code, output = invoke("run", "softmax", "--quick", "--scheduler", "tcp://127.0.0.1:9", "--out", str(tmp_path / "new"))
    assert code == 2 and "no Dask scheduler answers" in output
    assert not (tmp_path / "new").exists(), "nothing ran: no folder is left behind"
    assert not list(tmp_path.iterdir())


@contextmanager
def a_server_that_is_not_a_scheduler(answer: bytes | None):
    """A TCP server on this host that accepts connections and then says `answer` (None: nothing)."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed
                return
            held.append(conn)
            if answer:
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        for conn in held:
            conn.close()


def _invoke_within(seconds, *args):
    """invoke(), failing the test instead of hanging it when the command does not end."""
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(invoke(*args)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"`bwbench {' '.join(args)}` still runs after {seconds} s"
    return outcome[0]


@pytest.mark.parametrize("answer,message", [
    (None, "nothing answered"),  # Dask's own Client waits for ever here
    (b"HTTP/1.1 400 Bad Request\r\n\r\n" * 10, "does not speak Dask's protocol"),  # and fails with a traceback here
])
def test_a_server_that_is_not_a_scheduler_is_exit_2(monkeypatch, tmp_path, answer, message):
    monkeypatch.setattr("bwbench.fleet.cluster.CONNECT_TIMEOUT", "1s")
    with a_server_that_is_not_a_scheduler(answer) as address:
        code, output = _invoke_within(60, "run", "softmax", "--quick", "--scheduler", address, "--out", str(tmp_path / "new"))
    assert code == 2 and message in output and "Traceback" not in output, output
    assert not (tmp_path / "new").exists()


def test_a_worker_address_given_as_the_scheduler_is_exit_2(three_fake_gpus, tmp_path):
    worker = next(iter(three_fake_gpus.scheduler_info()["workers"]))
    code, output = _invoke_within(60, "run", "softmax", "--quick", "--scheduler", worker, "--out", str(tmp_path / "new"))
    assert code == 2 and "a Dask Worker answers there, not a Dask scheduler" in output, output


def invoke_on(monkeypatch, client, fake, *args):
    """`bwbench run softmax --quick --scheduler given ARGS` on the cluster of `client`, each worker
    measuring with `fake`."""
    @contextmanager
    def given(*_args, **_kwargs):
        yield client

    monkeypatch.setattr("bwbench.fleet.cluster.fleet_client", given)
    monkeypatch.setattr("bwbench.fleet.worker.measure_on_this_gpu", fake)  # the workers are threads of this process
    return invoke("run", "softmax", "--quick", "--scheduler", "given", "--no-report", *args)


def test_force_replaces_the_files_of_an_existing_name(three_fake_gpus, monkeypatch, tmp_path):
    out = ("--out", str(tmp_path), "--name", "burnin")
    code, output = invoke_on(monkeypatch, three_fake_gpus, FakeGpus(cases=1), *out)
    assert code == 0, output
    code, output = invoke_on(monkeypatch, three_fake_gpus, FakeGpus(cases=2), *out)
    assert code == 2 and "--force" in output  # never replaced without it
    code, output = invoke_on(monkeypatch, three_fake_gpus, FakeGpus(cases=2), *out, "--force")
    assert code == 0, output
    assert len(read_document(tmp_path / "burnin.json").records) == 3 * 2 * 3
    assert len((tmp_path / "burnin.csv").read_text().splitlines()) == 1 + 3 * 2 * 3
    with fake_gpu_cluster(0) as no_gpus:  # a run that cannot start leaves the files it would have replaced
        code, output = invoke_on(monkeypatch, no_gpus, FakeGpus(cases=2), *out, "--force")
    assert code == 2 and "no worker of this scheduler declares a GPU" in output, output
    assert len(read_document(tmp_path / "burnin.json").records) == 3 * 2 * 3


def test_ctrl_c_before_any_gpu_started_writes_nothing(monkeypatch, tmp_path):
    @contextmanager
    def starting(*_args, **_kwargs):  # Ctrl-C while the local cluster starts its workers
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr("bwbench.fleet.cluster.fleet_client", starting)
    code, output = invoke("run", "softmax", "--quick", "--scheduler", "given", "--out", str(tmp_path / "new"),
                          "--name", "burnin")
    assert code == 130 and "interrupted" in output and "Traceback" not in output, output
    assert "burnin.json" not in output  # no file is named that does not exist
    assert not (tmp_path / "new").exists()


class InterruptWhenQuiet(InterruptAfter):
    """A sink that is Ctrl-C'd once `slot` is said to be silent (other slots' silences are noted)."""

    def __init__(self, inner, slot: str):
        super().__init__(inner, 0)
        self.slot, self.told = slot, []

    def quiet(self, run, seconds):
        self.inner.quiet(run, seconds)
        self.told.append((run.slot, dict(run.current or {})))
        if run.slot == self.slot:
            raise KeyboardInterrupt


def test_a_gpu_that_sends_nothing_is_named_and_ctrl_c_still_stops_the_run(tmp_path):
    from rich.console import Console

    from bwbench.fleet.collect import FleetCollector
    from bwbench.fleet.command import _ShowingSink
    from bwbench.fleet.merge import FleetResults

    console = Console(record=True, width=200)
    results = FleetResults(tmp_path / "quiet.json", {}, {})
    shown = _ShowingSink(results, __import__("rich.progress").progress.Progress(console=console), console, 12)
    sink = InterruptWhenQuiet(shown, "fake-1")
    request = RunRequest(suites=("softmax",), measure=FakeGpus(cases=3, stall_at={1: 1}))
    with fake_gpu_cluster(2) as client:
        collector = FleetCollector(client, request, sink, quiet_s=0.5)
        runs = collector.run()
    results.finish(interrupted=True, health=None)
    assert ("fake-1", {"key": case_key("softmax", "cols=2048", "float32"), "suite": "softmax", "case": "cols=2048",
                       "dtype": "float32"}) in sink.told
    text = " ".join(console.export_text().split())
    assert "no news from GPU 1 (Fake GPU, GPU-fake-1, fakehost) for" in text
    assert "still in softmax cols=2048 float32" in text and "Ctrl-C stops the run" in text
    assert collector.interrupted and {r.slot: r.status for r in runs} == {"fake-0": "done", "fake-1": "stopped"}
    kept = read_document(tmp_path / "quiet.json")
    assert len([r for r in kept.records if r.gpu_index == 1]) == 3  # its first case is kept


def test_two_workers_on_one_gpu_are_warned_about(three_fake_gpus, tmp_path):
    code, _doc, text = _run(three_fake_gpus, tmp_path, FakeGpus(cases=1, uuid_of={2: "GPU-fake-0"}))
    text = " ".join(text.split())
    assert "workers fake-0 and fake-2 measure the same GPU (GPU-fake-0)" in text or \
        "workers fake-2 and fake-0 measure the same GPU (GPU-fake-0)" in text, text
    assert "CUDA_VISIBLE_DEVICES" in text


def test_a_fleet_run_is_added_to_the_store_as_a_run_per_gpu(three_fake_gpus, tmp_path):
    import sqlite3
    from contextlib import closing

    from rich.console import Console

    from bwbench.fleet.command import FleetOptions, FleetOutput, run_fleet

    console = Console(record=True, width=200)
    store = tmp_path / "h.sqlite"
    code = run_fleet(RunRequest(suites=("softmax",), measure=FakeGpus()), FleetOptions(scheduler="given"),
                     FleetOutput(tmp_path, "fleet", False, store=store), {}, {"softmax": {}}, console,
                     client=three_fake_gpus)
    text = " ".join(console.export_text().split())
    assert code == 0, text
    assert "history: 36 records added" in text and "3 GPUs" in text, text
    with closing(sqlite3.connect(store)) as conn:
        per_gpu = conn.execute("SELECT r.gpu_uuid, COUNT(*) FROM runs r JOIN results x ON x.run_id = r.run_id "
                               "GROUP BY r.gpu_uuid").fetchall()
    assert sorted(per_gpu) == [("GPU-fake-0", 12), ("GPU-fake-1", 12), ("GPU-fake-2", 12)]


def test_report_shows_a_fleet_file_as_a_run_per_gpu_and_compare_refuses_it(three_fake_gpus, tmp_path):
    code, _doc, text = _run(three_fake_gpus, tmp_path, FakeGpus())
    assert code == 0, text
    fleet = tmp_path / "fleet.json"
    page = tmp_path / "page.html"
    exit_code, output = invoke("report", str(fleet), "-o", str(page))
    assert exit_code == 0, output
    html = page.read_text()
    assert all(f"fleet GPU {i} Fake GPU" in html for i in range(3)), "each GPU is its own run in the report"
    exit_code, output = invoke("compare", str(fleet), str(fleet))
    assert exit_code == 2 and "is a fleet run of 3 GPUs" in output and "Traceback" not in output, output
