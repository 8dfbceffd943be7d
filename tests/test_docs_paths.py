"""The docs name files that exist, and the reference index lists exactly the reference runs there
are: a moved or deleted file shows up here, not in a user's failed command."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "reports" / "reference"
DOCS = [REPO / "README.md", REPO / "reports" / "README.md", REFERENCE / "README.md",
        *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs").glob("*.yml"))]
REPO_PATH = re.compile(r"(?<![\w./-])((?:bwbench|suites|kernels|docs|tools|tests|examples|scripts|notes|reports/reference)/[\w.*/-]*[\w*])")


PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")
"""A path segment like NAME in `suites/NAME.py`: a pattern for the reader, not a file."""


def named_paths(text: str) -> set[str]:
    return {path for path in REPO_PATH.findall(text)
            if not any(PLACEHOLDER.match(part.split(".")[0]) for part in path.split("/"))}


def test_the_pattern_finds_paths_and_globs_but_not_folder_names():
    text = ("see `tools/tables.py`, run bwbench report reports/reference/h100/*.json; bwbench/   the harness;"
            " a new `suites/NAME.py`")
    assert named_paths(text) == {"tools/tables.py", "reports/reference/h100/*.json"}


def test_every_path_the_docs_name_exists():
    missing = []
    for doc in DOCS:
        for path in named_paths(doc.read_text(encoding="utf-8")):
            if not list(REPO.glob(path)):
                missing.append(f"{doc.relative_to(REPO)}: {path}")
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(sorted(missing))


def test_the_reference_index_lists_every_reference_run_and_nothing_else():
    index = (REFERENCE / "README.md").read_text(encoding="utf-8")
    listed = {name for name in re.findall(r"`([\w./-]+\.json)`", index) if "/" in name}
    present = {p.relative_to(REFERENCE).as_posix() for p in REFERENCE.rglob("*.json")}
    assert present, "no reference runs"
    assert listed == present, f"in the index only: {sorted(listed - present)}; on disk only: {sorted(present - listed)}"
