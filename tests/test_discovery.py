"""Suites from anywhere: a file, a folder, $BWBENCH_SUITES_PATH, the bwbench.suites entry points;
two suites with one name, and a broken file named with its line."""

import sys
import textwrap

import pytest
from typer.testing import CliRunner

from bwbench.cli import app
from bwbench.discovery import (ENTRY_POINT_GROUP, PATH_VARIABLE, BrokenSuite, SuiteCollision, listing,
                               registry, resolve)
from bwbench.suite import SelectionError


def suite_source(name: str, kind: str = "triton") -> str:
    return textwrap.dedent(f'''
        import torch
        from bwbench import Suite, Traffic

        suite = Suite({name!r}, "a user's suite", axes={{"n": [64]}}, dtypes=["float32"])

        @suite.inputs
        def inputs(case, gen):
            return {{"x": torch.randn(case.n, generator=gen, device=gen.device)}}

        @suite.reference
        def reference(x):
            return x.double()

        @suite.traffic
        def traffic(case):
            return Traffic(read=4 * case.n, write=4 * case.n)

        @suite.impl("mine", kind={kind!r})
        def mine(case):
            return lambda x: x.clone()
        ''')


def write(folder, filename, text):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(text)
    return path


def test_a_suite_file_by_path(tmp_path):
    path = write(tmp_path, "my_suite.py", suite_source("my_suite"))
    [suite] = resolve(str(path))
    assert suite.name == "my_suite" and suite.source == str(path.resolve())
    assert suite.implementations["mine"].kind == "triton"


def test_a_folder_gives_every_suite_in_it(tmp_path):
    write(tmp_path / "mine", "one.py", suite_source("one"))
    write(tmp_path / "mine", "two.py", suite_source("two", kind="my_lib"))
    write(tmp_path / "mine", "_helper.py", "x = 1\n")
    assert [s.name for s in resolve(str(tmp_path / "mine") + "/")] == ["one", "two"]


def test_mixed_lists_of_names_and_paths(tmp_path):
    path = write(tmp_path, "mine.py", suite_source("mine"))
    assert [s.name for s in resolve(f"softmax,{path}")] == ["softmax", "mine"]


def test_suites_path_variable(tmp_path, monkeypatch):
    write(tmp_path / "a", "alpha.py", suite_source("alpha"))
    write(tmp_path / "b", "beta.py", suite_source("beta"))
    monkeypatch.setenv(PATH_VARIABLE, f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    known = registry()
    assert {"alpha", "beta", "softmax"} <= set(known)
    assert resolve("beta")[0].source == str((tmp_path / "b" / "beta.py").resolve())


class FakeEntryPoint:
    def __init__(self, name, target):
        self.name, self.value, self.module, self._target = name, f"fake_pkg:{name}", "fake_pkg", target

    def load(self):
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


def test_entry_point_suites(tmp_path, monkeypatch):
    import importlib.metadata as metadata

    from bwbench.discovery import load_suite_file

    shipped = load_suite_file(write(tmp_path / "pkg", "shipped.py", suite_source("shipped")))

    def entry_points(group=None, **kw):
        return [FakeEntryPoint("shipped", shipped)] if group == ENTRY_POINT_GROUP else []

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    assert registry()["shipped"] is shipped
    assert resolve("shipped") == [shipped]


@pytest.mark.parametrize("source, line", [
    ("from bwbench import Suite\n\nsuite = Suite('brk', 'x', axes={'n': [1]}, domains={'m': None})\n", 3),
    ("import torch\n\nvalue = 1 / 0\n", 3),
    ("def broken(:\n", 1),
    (None, None),
])
def test_a_broken_entry_point_names_the_users_line_not_bwbenchs(tmp_path, monkeypatch, source, line):
    """A package's module that fails to import inside bwbench (a bad Suite argument), in its own
    code, on a syntax error, or does not exist: the message names the package's file and line."""
    import importlib.metadata as metadata

    module = f"brk_{tmp_path.name.replace('-', '_')}"
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    point = metadata.EntryPoint(name="brk", value=f"{module}:suite", group=ENTRY_POINT_GROUP)
    monkeypatch.setattr(metadata, "entry_points", lambda group=None, **kw: [point] if group == ENTRY_POINT_GROUP else [])
    entry = registry()["brk"]
    assert isinstance(entry, BrokenSuite)
    if source is None:  # where is the entry point itself: named once, not again in the error
        assert entry.line is None and "No module named" in entry.error
        assert f"{entry.where}: {entry.error}".count("entry point brk =") == 1, (entry.where, entry.error)
    else:
        assert entry.where == f"{(tmp_path / f'{module}.py').resolve()}:{line}", entry.where


def test_two_suites_with_one_name_name_both_files(tmp_path, monkeypatch):
    first = write(tmp_path / "a", "dup.py", suite_source("dup"))
    second = write(tmp_path / "b", "dup.py", suite_source("dup"))
    with pytest.raises(SuiteCollision) as err:
        resolve(f"{first},{second}")
    assert str(first.resolve()) in str(err.value) and str(second.resolve()) in str(err.value)
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path / "a"))
    shadow = write(tmp_path / "c", "softmax.py", suite_source("softmax"))
    monkeypatch.setenv(PATH_VARIABLE, str(shadow.parent))
    with pytest.raises(SuiteCollision, match="softmax"):
        registry()
    result = CliRunner().invoke(app, ["run", "softmax"])
    assert result.exit_code == 2 and str(shadow.resolve()) in result.output, result.output


BROKEN = "import torch\nfrom bwbench import Suite\n\nsuite = Suite('bad', 'x', axes={'n': [1]})\nvalue = 1 / 0\n"


def test_a_broken_suite_file_is_exit_2_with_file_and_line(tmp_path):
    path = write(tmp_path, "bad.py", BROKEN)
    with pytest.raises(SelectionError, match=r"bad\.py:5: ZeroDivisionError"):
        resolve(str(path))
    for command in (["run", str(path)], ["list", str(path)]):
        result = CliRunner().invoke(app, command)
        text = result.output.replace("\n", "")
        assert result.exit_code == 2, result.output
        assert "bad.py:5" in text and "ZeroDivisionError" in text and "Traceback" not in text


def test_a_syntax_error_names_its_line(tmp_path):
    path = write(tmp_path, "typo.py", "from bwbench import Suite\nsuite = Suite('typo', 'x', axes={'n': [1]}\n\n")
    [entry] = listing(str(path)).values()
    assert isinstance(entry, BrokenSuite) and entry.line is not None
    assert entry.where.startswith(str(path.resolve()) + ":")


def test_list_a_folder_and_run_an_unknown_name(tmp_path):
    write(tmp_path, "triton_softmax.py", suite_source("triton_softmax"))
    result = CliRunner().invoke(app, ["list", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "triton_softmax" in result.output and "mine (triton)" in result.output
    result = CliRunner().invoke(app, ["run", "no_such_suite"])
    assert result.exit_code == 2 and "no suite named" in result.output


def test_run_of_a_path_without_a_gpu_gets_past_discovery(tmp_path, monkeypatch):
    import bwbench.device as device

    path = write(tmp_path, "mine.py", suite_source("mine"))
    monkeypatch.setattr(device, "require_cuda", lambda index=0: (_ for _ in ()).throw(device.NoGpuError("no CUDA GPU")))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "no CUDA GPU" in result.output


def test_a_suite_outside_the_package_imports_only_the_public_api():
    import bwbench

    for name in ("Suite", "Traffic", "Tolerance", "Skip", "pow2", "compile_per_case", "bench", "plan", "run", "load"):
        assert getattr(bwbench, name).__doc__, name


def test_import_bwbench_stays_cheap():
    import subprocess
    import sys

    code = "import sys, bwbench; bwbench.Suite; print('torch' in sys.modules, 'pandas' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_a_path_that_exists_but_is_no_file_or_folder_says_so(tmp_path):
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(SelectionError, match="not a suite file or folder"):
        resolve(str(fifo))


def test_all_with_a_broken_suite_on_the_path_is_an_error_not_a_run_without_it(tmp_path, monkeypatch):
    """`bwbench run all` left a user's suite that fails to import out without a word and exited 0,
    so a typo in a suite on $BWBENCH_SUITES_PATH meant it was silently never measured."""
    write(tmp_path / "mine", "good.py", suite_source("good"))
    write(tmp_path / "mine", "broken.py", BROKEN)
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path / "mine"))
    with pytest.raises(SelectionError, match=r"broken\.py:5: ZeroDivisionError"):
        resolve("all")
    result = CliRunner().invoke(app, ["run", "all", "--dry-run"])
    assert result.exit_code == 2 and "broken.py:5" in result.output.replace("\n", ""), result.output


def test_a_path_object_is_one_path_even_with_a_comma_in_it(tmp_path):
    """resolve(Path(...)) split the path's text on commas as if it were a list of suites, so a
    suite in a folder named "v1,v2" was "no such file or folder", and so was its file for a worker."""
    path = write(tmp_path / "v1,v2", "mine.py", suite_source("comma_mine"))
    assert [s.name for s in resolve(path)] == ["comma_mine"]
    assert [s.name for s in resolve(path.parent)] == ["comma_mine"]
    from bwbench.session import SuitePlan  # a fleet worker or profile child loads it again by its file
    [suite] = resolve(path)
    assert SuitePlan.from_work_item(SuitePlan(suite, [], []).work_item()).suite is suite


def test_a_suite_file_imports_the_module_beside_it(tmp_path, monkeypatch):
    """A user keeps the kernel in its own file next to the suite (`import my_kernels`), as a script
    run from that folder would import it; the suite's build functions may import it later too."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    folder = tmp_path / "my bench"
    folder.mkdir()
    (folder / "nu_sibling_kernels.py").write_text("def double(x):\n    return x * 2\n")
    source = suite_source("nu_sibling").replace("import torch\n", "import torch\nimport nu_sibling_kernels\n", 1)
    (folder / "bench.py").write_text(source)
    [suite] = resolve(str(folder / "bench.py"))
    assert suite.name == "nu_sibling"
    import importlib
    assert importlib.import_module("nu_sibling_kernels").double(2) == 4  # later imports still find it
    assert sys.path[0] != str(folder.resolve())  # not left in front of installed packages


def test_list_of_an_unknown_name_says_which_suites_there_are():
    result = CliRunner().invoke(app, ["list", "softmx"])
    assert result.exit_code == 2 and "no suite named 'softmx'" in result.output
    assert "softmax" in result.output.split("softmx", 1)[1] and "./my_suite.py" in result.output


def test_a_suite_built_under_another_name_is_an_error_not_a_helper_left_out(tmp_path):
    """`bench = Suite(...)` in a folder of suites was taken for a helper and silently not run."""
    write(tmp_path / "mine", "one.py", suite_source("nu_one"))
    misnamed = suite_source("nu_misnamed").replace("suite = Suite(", "bench = Suite(").replace("@suite.", "@bench.")
    write(tmp_path / "mine", "two.py", misnamed)
    write(tmp_path / "mine", "three.py", "suite = 3\n")
    write(tmp_path / "mine", "helper.py", "SIZES = [1, 2]\n")
    with pytest.raises(SelectionError, match=r"two\.py: the file builds a Suite as `bench`.*suite = Suite"):
        resolve(str(tmp_path / "mine" / "two.py"))
    with pytest.raises(SelectionError, match=r"three\.py: `suite` is int 3, not a Suite"):
        resolve(str(tmp_path / "mine" / "three.py"))
    with pytest.raises(SelectionError, match=r"(two|three)\.py: "):  # never the folder's other suites alone
        resolve(str(tmp_path / "mine"))


def test_a_folder_that_cannot_be_read_says_so_not_that_it_has_no_suites(tmp_path, monkeypatch):
    import os

    folder = tmp_path / "locked"
    write(folder, "one.py", suite_source("nu_locked"))
    listdir = os.listdir

    def refuse(path="."):
        if str(path) == str(folder):
            raise PermissionError(13, "Permission denied")
        return listdir(path)

    monkeypatch.setattr(os, "listdir", refuse)  # as a folder without read permission for a user (tests run as root)
    monkeypatch.setattr(type(folder), "glob", lambda self, pattern: iter(()))
    with pytest.raises(SelectionError, match="locked: cannot read this folder .Permission denied.; check its permissions"):
        resolve(str(folder))
