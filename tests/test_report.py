"""The HTML report: content, escaping of results-file text, offline page, and a real browser render."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bwbench import report
from bwbench.results import Record, RunDocument, read_document

ROWS = 49152
COLS = (32, 1024, 32768)
HOSTILE = "<script>alert(1)</script>"

# Fraction of the copy bandwidth each implementation reaches, per cols value.
SHARE = {
    "naive": (0.30, 0.35, 0.25),
    "torch": (0.55, 0.80, 0.82),
    "compiled": (0.60, 0.90, 0.91),
    "cudnn": (0.50, 0.85, None),  # None: skipped (over the cuDNN limit)
}
COPY_GBPS = (1450.0, 2900.0, 3050.0)


def make_stats(median_us: float) -> dict:
    """A plausible timing summary around a median, in the shape bwbench.stats.Stats writes."""
    return {"count": 50, "min_us": median_us * 0.97, "p10_us": median_us * 0.985, "median_us": median_us,
            "p90_us": median_us * 1.03, "max_us": median_us * 1.12, "mean_us": median_us * 1.005,
            "stdev_us": median_us * 0.012, "noise": 0.012, "converged": True}


def make_record(impl: str, kind: str, cols: int, gbps: float, copy_gbps: float, peak: float,
                rows: int = ROWS, dtype: str = "float16", telemetry: dict | None = None) -> Record:
    """An ok record whose gbps follows from bytes_total and the median time."""
    read = write = rows * cols * 2
    total = read + write
    median_us = total / gbps / 1e3
    stats = make_stats(median_us)
    return Record(suite="softmax", case=f"rows={rows},cols={cols}", params={"rows": rows, "cols": cols},
                  dtype=dtype, impl=impl, kind=kind, status="ok", bytes_read=read, bytes_written=write,
                  bytes_total=total, timing="cuda-graph", stats=stats,
                  samples_us=[median_us * f for f in (0.99, 1.0, 1.01)],
                  gbps=total / median_us / 1e3, copy_gbps=copy_gbps,
                  pct_copy=100.0 * gbps / copy_gbps, pct_peak=100.0 * gbps / peak,
                  check={"passed": True, "max_abs_err": 1e-4} if kind != "ceiling" else None,
                  telemetry=telemetry)


def make_document(gpu_name: str = "NVIDIA H100 80GB HBM3", peak: float = 3352.0, speed: float = 1.0,
                  failure_reason: str = "check failed: max_abs_err 0.5 > tolerance",
                  interrupted: bool = False, rows_values: tuple[int, ...] = (ROWS,)) -> RunDocument:
    """A softmax run: copy ceiling, four implementations, one failed and one skipped record."""
    records = []
    for rows in rows_values:
        for i, cols in enumerate(COLS):
            copy = COPY_GBPS[i] * speed
            records.append(make_record("copy", "ceiling", cols, copy, copy, peak, rows=rows))
            for impl, shares in SHARE.items():
                case = f"rows={rows},cols={cols}"
                if impl == "naive" and cols == 32768:
                    records.append(Record(suite="softmax", case=case, params={"rows": rows, "cols": cols},
                                          dtype="float16", impl=impl, kind="naive", status="failed",
                                          reason=failure_reason, gbps=86420.75))
                elif shares[i] is None:
                    records.append(Record(suite="softmax", case=case, params={"rows": rows, "cols": cols},
                                          dtype="float16", impl=impl, kind=impl, status="skipped",
                                          reason="cuDNN softmax supports cols <= 16384"))
                else:
                    telemetry = {"throttled": ["thermal"]} if (impl == "compiled" and cols == 1024) else {}
                    records.append(make_record(impl, "compiled" if impl == "compiled" else impl, cols,
                                               copy * shares[i], copy, peak, rows=rows, telemetry=telemetry))
    environment = {
        "gpu_name": gpu_name, "gpu_uuid": "GPU-1234", "sm_count": 132, "l2_bytes": 50 * 2**20,
        "memory_bytes": 80 * 2**30, "driver_version": "550.54", "cuda_version": "12.4",
        "torch_version": "2.4.0", "cupy_version": None, "cudnn_version": "9.1.0", "peak_gbps": peak,
        "copy_gbps": 3050.0 * speed, "bwbench_version": "0.1.0", "git_commit": "abc123def456",
        "host": "node-7", "created": "2025-01-02T03:04:05Z",
    }
    suites = {"softmax": {"description": "Row softmax over the last axis", "x_axis": "cols",
                          "axes": {"rows": [str(r) for r in rows_values], "cols": [str(c) for c in COLS]},
                          "dtypes": ["float16"],
                          "implementations": {"naive": {"kind": "naive", "description": "three kernels"},
                                              "torch": {"kind": "torch", "description": "torch.softmax"},
                                              "compiled": {"kind": "compiled", "description": "torch.compile"},
                                              "cudnn": {"kind": "cudnn", "description": "cudnnSoftmaxForward"}}}}
    options = {"suites": ["softmax"], "dtypes": ["float16"], "quick": False, "max_noise": 0.005}
    return RunDocument(environment=environment, options=options, suites=suites, records=records,
                       complete=not interrupted, interrupted=interrupted)


def chart_count(page: str) -> int:
    return page.count('class="plotly-graph-div"')


def test_page_has_implementations_tables_and_failures():
    page = report.render_html([("H100", make_document())])
    for impl in ("naive", "torch", "compiled", "cudnn", "copy"):
        assert f">{impl}</th>" in page
    assert "speedup vs torch" in page
    # compiled at 90% of copy against torch at 80%: 1.125x, written to two decimals.
    assert "1.12×" in page or "1.13×" in page
    assert "1.00×" in page  # torch against itself
    assert ">FAILED</td>" in page and ">skipped</td>" in page
    assert "check failed: max_abs_err 0.5 &gt; tolerance" in page
    assert "cuDNN softmax supports cols &lt;= 16384" in page
    assert "⚠ throttled" in page
    assert "NVIDIA H100 80GB HBM3" in page and "3352 GB/s" in page and "50 MiB" in page
    assert "Row softmax over the last axis" in page
    assert chart_count(page) == 2
    assert "interrupted run" not in page


def test_failed_and_skipped_records_are_never_plotted():
    page = report.render_html([("H100", make_document())])
    assert "86420" not in page


def test_page_is_offline_and_inlines_plotly_once():
    page = report.render_html([("H100", make_document())])
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, flags=re.I)
    assert not re.search(r"<link[^>]*href\s*=\s*[\"']?https?:", page, flags=re.I)
    assert page.count("window.PlotlyConfig") == 1
    assert page.count("plotly.js v") == 1
    assert "Content-Security-Policy" in page


def test_missing_environment_values_and_interrupted_run():
    doc = make_document(interrupted=True)
    doc.environment = {"gpu_name": None}
    page = report.render_html([("run", doc)])
    assert "interrupted run: partial results" in page
    assert "<td>—</td>" in page
    assert "None" not in page.split('<div class="chart">')[0]


def test_results_file_text_is_escaped():
    doc = make_document(gpu_name=HOSTILE, failure_reason="kernel <b>crashed</b> & burned")
    doc.options["note"] = "</td><script>alert(3)</script>"
    page = report.render_html([("<script>alert(2)</script>", doc)])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "kernel &lt;b&gt;crashed&lt;/b&gt; &amp; burned" in page
    for n in (1, 2, 3):
        assert f"<script>alert({n})" not in page
        assert f"alert({n})</script>" not in page
    # Every <script> tag is one the report wrote: the collector, plotly's config and bundle,
    # one per chart, and the final flush.
    assert len(re.findall(r"<script\b", page)) == 3 + chart_count(page) + 1


def test_plotly_escapes_script_end_in_figure_json():
    """Defence in depth: even a raw '</script>' in a trace name cannot leave plotly's script block."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=[1], y=[1], name="</script><script>alert(4)</script>"))
    fig.update_layout(title="</script>")
    chunk = report._figure_html(fig, "t", include_js=False)
    assert "</script><script>alert(4)" not in chunk
    assert chunk.count("</script>") == 1


def test_plot_text_removes_angle_brackets():
    assert report.plot_text("a<b>c</b>") == "a‹b›c‹/b›"


def test_two_documents_make_traces_for_both():
    page = report.render_html([("H100", make_document()),
                               ("H200", make_document("NVIDIA H200", peak=4800.0, speed=1.4))])
    for label in ("H100", "H200"):
        for impl in ("naive", "torch", "compiled", "cudnn"):
            name = f"{impl} · {label}"
            # plotly escapes non-ASCII text as \u00b7 with the standard json module and keeps it
            # as UTF-8 with orjson: either form is the same trace name in the browser.
            assert json.dumps(name, ensure_ascii=False) in page or json.dumps(name) in page
        assert f"({label})" in page  # the peak line names its run
    assert "NVIDIA H200" in page and "4800 GB/s" in page
    assert chart_count(page) == 3, "GB/s, % of copy and, with two GPUs, % of each one's peak"


def test_other_axes_become_trace_groups():
    page = report.render_html([("H100", make_document(rows_values=(4096, 49152)))])
    assert '"compiled rows=4096"' in page and '"compiled rows=49152"' in page


def test_categorical_x_axis_for_shape_strings():
    doc = make_document()
    for rec in doc.records:
        rec.params = {"shape": [rec.params["rows"], rec.params["cols"]]}
    doc.suites["softmax"]["x_axis"] = "shape"
    page = report.render_html([("H100", doc)])
    assert '"type":"category"' in page and "49152x1024" in page
    # Shapes in sweep order (natural sort), not as text where "49152x1024" < "49152x32".
    assert '"categoryarray":["49152x32","49152x1024","49152x32768"]' in page


def test_log_axis_ticks_at_swept_values():
    page = report.render_html([("H100", make_document())])
    assert '"type":"log"' in page
    assert '"ticktext":["32","1024","32768"]' in page


def test_write_report_roundtrip(tmp_path: Path):
    from bwbench.results import ResultsWriter

    results = tmp_path / "run.json"
    writer = ResultsWriter(results, make_document())
    writer.finish()
    out = report.write_report([("H100", read_document(results))], tmp_path / "sub" / "report.html", title="T")
    assert out.is_file() and "<title>T</title>" in out.read_text(encoding="utf-8")


def find_chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def chromium_command(binary: str, profile: Path) -> list[str]:
    return [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--virtual-time-budget=10000"]


def test_report_renders_in_chromium(tmp_path: Path):
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary found (shutil.which('chromium') and /usr/bin/chromium)")
    page_path = report.write_report([("H100", make_document()),
                                     ("H200", make_document("NVIDIA H200", peak=4800.0, speed=1.4))],
                                    tmp_path / "report.html")
    charts = chart_count(page_path.read_text(encoding="utf-8"))
    assert charts == 3
    base = chromium_command(binary, tmp_path / "profile")
    done = subprocess.run(base + ["--dump-dom", page_path.as_uri()], capture_output=True, text=True, timeout=120)
    dom = done.stdout
    assert dom, f"chromium printed no DOM (rc {done.returncode}): {done.stderr[-2000:]}"
    assert dom.count('class="main-svg"') >= charts
    errors = re.search(r'<pre id="bwbench-js-errors">(.*?)</pre>', dom, flags=re.S)
    assert errors is not None, "error element missing from the rendered page"
    assert errors.group(1).strip() == "", f"JavaScript errors: {errors.group(1)}"
    png = tmp_path / "report.png"
    subprocess.run(base + [f"--screenshot={png}", "--window-size=1400,2400", page_path.as_uri()],
                   capture_output=True, text=True, timeout=120)
    assert png.is_file() and png.stat().st_size > 10_000


def test_comparing_gpus_adds_peak_normalised_chart_and_ratio_table():
    import copy

    from bwbench.report import render_html
    from bwbench.results import read_document

    h200 = read_document(Path(__file__).parent / "data" / "h200-softmax-run1.json")
    h100 = copy.deepcopy(h200)
    h100.environment["gpu_name"] = "NVIDIA H100 80GB HBM3"
    for r in h100.records:
        if r.gbps:
            r.gbps *= 0.5
    page = render_html([("H200", h200), ("H100", h100)])
    assert "% of each GPU&#x27;s theoretical peak" in page or "% of each GPU's theoretical peak" in page
    assert "Runs compared: median GB/s and ratios to H200" in page
    assert "0.50×" in page
    single = render_html([("H200", h200)])
    assert "Runs compared" not in single


def test_profile_figures_show_in_the_report():
    from bwbench.report import render_html
    from bwbench.results import read_document

    doc = read_document(Path(__file__).parent / "data" / "h200-softmax-run1.json")
    naive = next(r for r in doc.records if r.impl == "naive" and r.status == "ok")
    naive.extra = {"profile": {"kernel_count": 5, "model_bytes": 805e6, "dram_bytes": 5168e6, "bytes_ratio": 6.42,
                               "bwbench_median_us": 2170.6, "ncu_time_us": 2154.0, "time_ratio": 0.99}}
    page = render_html([("H200", doc)])
    assert "Nsight Compute: bytes really moved" in page and "6.42×" in page


def test_cells_carry_time_bytes_and_own_copy_on_hover():
    from bwbench.report import cell_detail
    from bwbench.results import Record

    rec = Record(suite="dropout", case="n=1", params={}, dtype="float16", impl="boolmask", kind="naive", status="ok",
                 bytes_total=1_342_177_280, stats={"median_us": 324.3}, gbps=4138.6,
                 extra={"own_copy": {"bytes": 1_342_177_280, "gbps": 4262.9}})
    text = cell_detail(rec)
    assert "median 324.3 µs" in text and "1,342.2 MB moved" in text and "own 1,342.2 MB (4,263 GB/s)" in text


def _masked_document() -> RunDocument:
    """A dropout-like run: the copy, a bitmask and torch's byte mask, each record with its mask memory."""
    doc = make_document()
    doc.records = [r for r in doc.records if r.impl in ("copy", "torch")]
    for r in doc.records:
        if r.impl == "torch":
            r.mask_bytes = 3_000_000
            bit = Record(**{**r.to_dict(), "impl": "optimized", "kind": "cuda", "mask_bytes": 375_000})
            doc.records.append(bit)
    return doc


def test_mask_memory_shows_next_to_torchs_in_the_report():
    page = report.render_html([("H100", _masked_document())])
    assert "mask kept" in page and ">3.0 MB</td>" in page and ">375.0 kB</td>" in page
    assert "mask kept" not in report.render_html([("H100", make_document())]), "no column without a mask"


def test_mask_memory_shows_in_the_terminal_table():
    from rich.console import Console

    from bwbench.console import summary_tables

    console = Console(width=200, record=True)
    for table in summary_tables(_masked_document().records):
        console.print(table)
    text = " ".join(console.export_text().split())
    assert "mask kept for the backward" in text and "3.0 MB" in text and "375.0 kB" in text
    console = Console(width=200, record=True)
    for table in summary_tables(make_document().records):
        console.print(table)
    assert " MB" not in console.export_text() and "mask kept" not in console.export_text()
