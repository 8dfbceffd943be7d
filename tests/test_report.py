"""The HTML report: content, escaping of results-file text, offline page, and a real browser render."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bwbench import report
from bwbench.results import Record, RunDocument, read_document
from synthetic_runs import softmax_run

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
    return page.count('class="bwbench-figure"')


def test_page_has_implementations_tables_and_failures():
    page = report.render_html([("H100", make_document())])
    for impl in ("naive", "torch", "compiled", "cudnn", "copy"):
        assert f">{impl}</th>" in page
    assert "speedup vs torch" in page
    assert page.index('id="summary"') < page.index('id="contents"') < page.index('id="suite-softmax-float16"') \
        < page.index('id="environment"')
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


@pytest.mark.parametrize("gbps", [None, -2000.0, math.nan, 0.0])
def test_an_ok_record_without_a_real_speed_is_shown_invalid_not_as_a_number(gbps):
    """A hand-edited file: gbps null made `report` a TypeError traceback, -2000 was a table cell."""
    doc = make_document()
    naive = next(r for r in doc.records if r.impl == "naive" and r.status == "ok")
    naive.gbps = gbps
    page = report.render_html([("H100", doc)])
    assert f'title="GB/s is {gbps}">invalid</td>' in page
    assert page.count("-2000") == (1 if gbps == -2000.0 else 0)  # in the hover text only


def test_page_is_offline_and_inlines_plotly_once():
    page = report.render_html([("H100", make_document())])
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, flags=re.I)
    assert not re.search(r"<link[^>]*href\s*=\s*[\"']?https?:", page, flags=re.I)
    assert page.count('id="bwbench-plotly"') == 1  # plotly.js packed once
    assert "Content-Security-Policy" in page
    assert "Page errors" not in page.split("<section id=\"bwbench-page-errors\" hidden>")[0]


def test_missing_environment_values_and_interrupted_run():
    doc = make_document(interrupted=True)
    doc.environment = {"gpu_name": None}
    page = report.render_html([("run", doc)])
    assert "interrupted run: partial results" in page
    assert "<td>—</td>" in page
    assert "None" not in page.split('<script type="application/json"')[0]


def test_results_file_text_is_escaped():
    doc = make_document(gpu_name=HOSTILE, failure_reason="kernel <b>crashed</b> & burned")
    doc.options["note"] = "</td><script>alert(3)</script>"
    page = report.render_html([("<script>alert(2)</script>", doc)])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "kernel &lt;b&gt;crashed&lt;/b&gt; &amp; burned" in page
    for n in (1, 2, 3):
        assert f"<script>alert({n})" not in page
        assert f"alert({n})</script>" not in page
    # Every <script> tag is one the report wrote: the collector, one data block per chart, the
    # packed plotly.js and its loader.
    assert len(re.findall(r"<script\b", page)) == 1 + chart_count(page) + 2


def test_chart_data_cannot_leave_its_script_element():
    """Defence in depth: even a raw '</script>' in a label stays JSON text inside its data block."""
    chunk = report.script_json({"name": "</script><script>alert(4)</script>", "t": "a & b"})
    assert "<" not in chunk and ">" not in chunk and "&" not in chunk
    assert json.loads(chunk)["name"] == "</script><script>alert(4)</script>"


def test_plot_text_removes_angle_brackets():
    assert report.plot_text("a<b>c</b>") == "a‹b›c‹/b›"


def test_two_documents_make_traces_for_both():
    page = report.render_html([("H100", make_document()),
                               ("H200", make_document("NVIDIA H200", peak=4800.0, speed=1.4))])
    for label in ("H100", "H200"):
        for impl in ("naive", "torch", "compiled", "cudnn"):
            assert f"{impl} · {label}" in page  # hover names say implementation and run
        assert f"peak {label} " in page  # the peak line names its run
    assert "NVIDIA H200" in page and "4800 GB/s" in page
    assert chart_count(page) == 2, "GB/s and, with two GPUs, the ratio chart"
    assert "peak ratio 1.43×" in page


def test_other_axes_go_behind_a_selector():
    page = report.render_html([("H100", make_document(rows_values=(4096, 49152)))])
    assert '<select class="bwbench-combo"' in page
    assert '<option value="0">rows=4096</option><option value="1">rows=49152</option>' in page
    assert '"meta":{"combo":1},"visible":false' in page


def test_categorical_x_axis_for_shape_strings():
    doc = make_document()
    for rec in doc.records:
        rec.params = {"shape": [rec.params["rows"], rec.params["cols"]]}
    doc.suites["softmax"]["x_axis"] = "shape"
    page = report.render_html([("H100", doc)])
    assert '"type":"category"' in page and "49152x1024" in page
    # Shapes in sweep order (natural sort), not as text where "49152x1024" < "49152x32".
    assert '"categoryarray":["49152x32","49152x1024","49152x32768"]' in page
    # Categories are markers, never joined by lines.
    assert '"mode":"lines+markers"' not in page and '"mode":"markers"' in page


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


def render_in_chromium(page_path: Path, tmp_path: Path, width: int = 1400) -> dict:
    """Open the page in headless Chromium and read back what it drew: page height and width, where the
    summary ends, how far the summary's tables and the contents' entries overflow their boxes, how
    many charts plotly drew, and the page's own JavaScript error list."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary found (shutil.which('chromium') and /usr/bin/chromium)")
    probe = ("<script>setTimeout(function () { var d = document.documentElement;"
             " var t = document.querySelector('#summary table');"
             " var p = document.createElement('pre'); p.id = 'probe';"
             " p.textContent = JSON.stringify({height: d.scrollHeight, width: d.scrollWidth,"
             " summaryBottom: t ? t.getBoundingClientRect().bottom : -1,"
             " overflow: Array.prototype.map.call(document.querySelectorAll('#summary .scroll, nav#contents li'),"
             " function (e) { return e.scrollWidth - e.clientWidth; }),"
             " drawn: document.querySelectorAll('.main-svg').length,"
             " state: document.body.getAttribute('data-charts'), errors: window.__bwbenchErrors});"
             " document.body.appendChild(p); }, 8000);</script>")
    probed = tmp_path / "probed.html"
    probed.write_text(page_path.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")
    done = subprocess.run(chromium_command(binary, tmp_path / "profile")
                          + [f"--window-size={width},900", "--dump-dom", probed.as_uri()],
                          capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, flags=re.S)
    assert found, f"chromium printed no probe (rc {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html_unescape(found.group(1)))


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_report_renders_in_chromium(tmp_path: Path):
    page_path = report.write_report([("H100", make_document()),
                                     ("H200", make_document("NVIDIA H200", peak=4800.0, speed=1.4))],
                                    tmp_path / "report.html")
    page = page_path.read_text(encoding="utf-8")
    charts = chart_count(page)
    assert charts == 2
    seen = render_in_chromium(page_path, tmp_path)
    assert seen["errors"] == [], f"JavaScript errors: {seen['errors']}"
    assert seen["state"] == "drawn" and seen["drawn"] >= charts
    png = tmp_path / "report.png"
    subprocess.run(chromium_command(find_chromium(), tmp_path / "profile")
                   + [f"--screenshot={png}", "--window-size=1400,2400", page_path.as_uri()],
                   capture_output=True, text=True, timeout=120)
    assert png.is_file() and png.stat().st_size > 10_000


def wide_document(gpu_name: str, peak: float, speed: float) -> RunDocument:
    """A run of three suites of the shapes the real ones have: a numeric sweep (softmax), a
    categorical x with three other axes (a bn_relu-like suite: a selector), and shapes paired with
    permutations (a permute-like suite: folded into the categories), two dtypes for the last."""
    doc = make_document(gpu_name, peak=peak, speed=speed)
    copy = 3000.0 * speed
    for direction in ("forward", "backward"):
        for variant in ("plain", "add"):
            for layout in ("NCHW", "NHWC"):
                for k, shape in enumerate(([32, 64, 112, 112], [32, 256, 56, 56], [32, 2048, 7, 7])):
                    params = {"direction": direction, "variant": variant, "shape": shape, "layout": layout}
                    case = ",".join(f"{a}={'x'.join(map(str, v)) if isinstance(v, list) else v}" for a, v in params.items())
                    for impl, kind, share in (("copy", "ceiling", 1.0), ("optimized", "cuda", 0.9 - 0.1 * k),
                                              ("torch", "torch", 0.5), ("cudnn", "cudnn", 0.6)):
                        rec = make_record(impl, kind, 1024, copy * share, copy, peak)
                        doc.records.append(Record(**{**rec.to_dict(), "suite": "bn_relu", "case": case, "params": params}))
    for dtype in ("float16", "float32"):
        for shape, perms in (([64, 256, 256], ([1, 0, 2], [0, 2, 1])), ([4096, 4096], ([1, 0],)),
                             ([8, 128, 128, 64], ([0, 2, 1, 3], [3, 2, 1, 0], [0, 1, 3, 2]))):
            for perm in perms:
                params = {"shape": shape, "perm": perm}
                case = f"shape={'x'.join(map(str, shape))},perm={'x'.join(map(str, perm))}"
                for impl, kind, share in (("copy", "ceiling", 1.0), ("optimized", "cuda", 0.95),
                                          ("torch", "torch", 0.3), ("compiled", "compiled", 0.9)):
                    rec = make_record(impl, kind, 1024, copy * share, copy, peak, dtype=dtype)
                    doc.records.append(Record(**{**rec.to_dict(), "suite": "permute", "case": case, "params": params}))
    doc.suites["bn_relu"] = {"description": "relu(bn(x))", "x_axis": "shape",
                             "implementations": {"optimized": {"kind": "cuda"}, "torch": {"kind": "torch"},
                                                 "cudnn": {"kind": "cudnn"}}}
    doc.suites["permute"] = {"description": "x.permute(perm).contiguous()", "x_axis": "shape",
                             "implementations": {"optimized": {"kind": "cuda"}, "torch": {"kind": "torch"},
                                                 "compiled": {"kind": "compiled"}}}
    return doc


def test_two_gpu_page_fits_renders_and_answers_first(tmp_path: Path):
    """The H100-against-H200 question on a synthetic pair of runs: the ratio summary is in the first
    screen, no JavaScript error, the page fits the window's width, and its size and height stay small."""
    page_path = report.write_report([("H100", wide_document("NVIDIA H100 80GB HBM3", 3352.0, 1.0)),
                                     ("H200", wide_document("NVIDIA H200", 4800.0, 1.4))], tmp_path / "two.html")
    page = page_path.read_text(encoding="utf-8")
    size = len(page.encode("utf-8"))
    assert size < 2_500_000, f"page is {size} bytes"
    summary = page[page.index('<section id="summary">'):page.index('<nav id="contents">')]
    assert "H200 against H100" in summary and "device copy 1.40×" in summary and "theoretical peak 1.43×" in summary
    for suite in ("softmax", "bn_relu", "permute · float16", "permute · float32"):
        assert f"<th>{suite}</th>" in summary
    assert ">1.40×</td>" in summary  # every implementation 1.4x faster, as the copy
    seen = render_in_chromium(page_path, tmp_path)
    assert seen["errors"] == [], f"JavaScript errors: {seen['errors']}"
    assert seen["state"] == "drawn" and seen["drawn"] >= chart_count(page)
    assert 0 < seen["summaryBottom"] <= 900, f"the ratio summary ends at {seen['summaryBottom']} px"
    assert seen["width"] <= 1400, f"the page is {seen['width']} px wide in a 1400 px window"
    sections = len(report.suite_dtype_groups([("a", wide_document("x", 1.0, 1.0))]))
    assert seen["height"] < 1800 + 800 * sections, f"page height {seen['height']} px for {sections} sections"


def test_comparing_gpus_adds_ratio_chart_and_ratio_table():
    import copy

    from bwbench.report import render_html

    h200 = softmax_run(1)
    h100 = copy.deepcopy(h200)
    h100.environment["gpu_name"] = "NVIDIA H100 80GB HBM3"
    for r in h100.records:
        if r.gbps:
            r.gbps *= 0.5
    page = render_html([("H200", h200), ("H100", h100)])
    assert "GB/s ratio to H200 per case, with the ratio of the theoretical peaks" in page
    assert "Median GB/s per run and ratios to H200" in page
    assert "0.50×" in page
    single = render_html([("H200", h200)])
    assert "Median GB/s per run" not in single and "ratio to" not in single


def test_profile_figures_show_in_the_report():
    from bwbench.report import render_html

    doc = softmax_run(1)
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


def test_is_baseline_prefers_the_suites_role_then_the_kind():
    from bwbench.summary import is_baseline

    meta = {"implementations": {"optimized": {"kind": "cuda"}, "torch": {"kind": "torch"},
                                "liger": {"kind": "triton", "role": "baseline"},
                                "mine": {"kind": "torch", "role": "under test"}}}
    assert not is_baseline(meta, "optimized") and is_baseline(meta, "torch")
    assert is_baseline(meta, "liger") and not is_baseline(meta, "mine")
    assert is_baseline({}, "x", kind="cudnn") and not is_baseline({}, "x", kind="triton")
    assert not is_baseline(meta, "copy")


def test_every_kind_gets_a_colour_and_known_kinds_keep_theirs():
    from bwbench.report_charts import KIND_COLORS, color_for_kind, implementation_colors

    assert color_for_kind("torch") == KIND_COLORS["torch"]
    for kind in ("liger", "quack", "", "some new kind"):
        assert re.fullmatch(r"#[0-9a-f]{6}", color_for_kind(kind))
    assert color_for_kind("liger") == color_for_kind("liger")
    colors = implementation_colors(["optimized", "online", "torch", "copy"],
                                   {"optimized": "cuda", "online": "cuda", "torch": "torch"})
    assert colors["optimized"] == KIND_COLORS["cuda"] and colors["online"] != colors["optimized"]


def test_summary_numbers_are_geometric_means():
    from bwbench.summary import copy_shares, run_ratios, speedups

    h100, h200 = make_document(), make_document("NVIDIA H200", peak=4800.0, speed=1.4)
    shares = {(s.impl): s for s in copy_shares(h100)}
    assert shares["compiled"].median_pct == pytest.approx(90.0) and shares["compiled"].lowest_pct == pytest.approx(60.0)
    assert shares["naive"].failed == 1 and shares["cudnn"].skipped == 1
    found = {(s.impl, s.baseline): s for s in speedups(h100)}
    assert set(found) == set(), "softmax's fixture has no implementation under test"
    ratios = {r.impl: r for r in run_ratios(h100, h200)}
    assert ratios["copy"].ratio == pytest.approx(1.4) and ratios["torch"].ratio == pytest.approx(1.4)
    h100.suites["softmax"]["implementations"]["compiled"]["role"] = "under test"
    found = {(s.impl, s.baseline): s for s in speedups(h100)}
    expected = math.exp((math.log(0.60 / 0.55) + math.log(0.90 / 0.80) + math.log(0.91 / 0.82)) / 3)
    assert found[("compiled", "torch")].ratio == pytest.approx(expected, rel=1e-3)
    assert found[("compiled", "torch")].cases == 3


def test_report_filters_and_title(tmp_path: Path):
    from typer.testing import CliRunner

    from bwbench.cli import app
    from bwbench.results import ResultsWriter

    for name, doc in (("a", make_document()), ("b", make_document("NVIDIA H200", peak=4800.0, speed=1.4))):
        ResultsWriter(tmp_path / f"{name}.json", doc).finish()
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", str(out),
                                      "--impl", "torch", "--dtype", "float16", "--suite", "softmax", "--title", "Mine"])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert "<title>Mine</title>" in page and "H200 against H100" in page
    assert "<th>torch</th>" not in page or "compiled" not in page.split('id="summary"')[1].split("</section>")[0]
    bad = CliRunner().invoke(app, ["report", str(tmp_path / "a.json"), "--impl", "fastest", "-o", str(out)])
    assert bad.exit_code == 2 and "not in these results" in bad.output


def test_three_runs_compare_each_with_the_first():
    page = report.render_html([("H100", make_document()),
                               ("H200", make_document("NVIDIA H200", peak=4800.0, speed=1.4)),
                               ("B200", make_document("NVIDIA B200", peak=8000.0, speed=2.0))])
    summary = page[page.index('<section id="summary">'):page.index('<nav id="contents">')]
    assert "H200 against H100" in summary and "B200 against H100" in summary
    assert ">2.00×</td>" in summary and ">1.40×</td>" in summary
    assert "peak ratio 1.43× (H200)" in page and "peak ratio 2.39× (B200)" in page


def test_page_errors_section_only_shows_when_there_are_errors():
    page = report.render_html([("H100", make_document())])
    assert '<section id="bwbench-page-errors" hidden>' in page
    assert "box.hidden = false" in page  # the collector reveals it on the first error


def test_files_of_one_gpu_with_different_suites_are_one_run():
    from dataclasses import replace

    from bwbench.summary import merge_same_gpu

    h100 = make_document("NVIDIA H100 80GB HBM3")
    other_suite = replace(h100, records=[replace(r, suite="log_softmax") for r in h100.records])
    again = make_document("NVIDIA H100 80GB HBM3")  # the same suite again: a second run, kept apart
    h200 = make_document("NVIDIA H200", peak=4800.0, speed=1.4)
    docs, stems = merge_same_gpu([h100, other_suite, again, h200], ["a", "b", "c", "d"])
    assert stems == ["a+b", "c", "d"]
    assert len(docs[0].records) == 2 * len(h100.records)
    assert {r.suite for r in docs[0].records} == {"softmax", "log_softmax"}
    assert docs[1] is again and docs[2] is h200


def test_long_names_keep_the_summary_on_the_first_screen(tmp_path: Path):
    """A long suite name pushed the summary's columns past the screen (the implementation under test
    behind a scroll bar), and long names in the contents ran over each other."""
    doc = make_document()
    suite = "my_company_fused_attention_softmax_with_causal_mask_and_dropout_v2_experimental_variant"
    for r in doc.records:
        r.suite = suite
        if r.impl == "compiled":
            r.impl = "optimized_two_pass_vectorized_kernel_with_async_copy_and_warp_shuffle_reduce"
    doc.suites = {suite: doc.suites["softmax"]}
    page = tmp_path / "long.html"
    report.write_report([("H100", doc)], page)
    seen = render_in_chromium(page, tmp_path)
    assert seen["overflow"] and max(seen["overflow"]) <= 0, seen["overflow"]
    assert 0 < seen["summaryBottom"] <= 900 and seen["width"] <= 1400, seen


def test_an_inexact_baseline_is_marked_in_the_report():
    """A baseline outside tolerance is timed and recorded `inexact`; the console said so, the report
    showed its GB/s (and speedups over it) as if its result were right."""
    doc = make_document()
    torch = next(r for r in doc.records if r.impl == "torch" and r.case.endswith("cols=1024"))
    torch.inexact, torch.reason = True, "inexact baseline (max_abs_err 0.031 > tolerance)"
    page = report.render_html([("H100", doc)])
    assert page.count('class="inexact"') == 1 and "inexact baseline (max_abs_err 0.031 &gt; tolerance)" in page
    assert "Inexact baselines (1)" in page
    assert 'class="inexact"' not in report.render_html([("H100", make_document())])
