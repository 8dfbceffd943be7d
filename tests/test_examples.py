"""The examples load as suites from their folder and use only bwbench's public API."""

import ast
from pathlib import Path

import bwbench
from bwbench.discovery import BrokenSuite, listing

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_examples_folder_lists_its_suites():
    found = listing(str(EXAMPLES))
    assert set(found) == {"triton_softmax", "raw_cuda_saxpy"}
    assert not any(isinstance(e, BrokenSuite) for e in found.values())
    triton = found["triton_softmax"]
    assert {i.name: (i.kind, i.role) for i in triton.implementations.values()} == {
        "triton": ("triton", "test"), "torch": ("torch", "baseline"), "bwbench": ("cuda", "baseline")}
    assert found["raw_cuda_saxpy"].implementations["raw_cuda"].role == "test"


def test_examples_import_only_the_public_api():
    for path in EXAMPLES.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bwbench"):
                assert node.module == "bwbench", f"{path.name} imports {node.module}"
                assert all(alias.name in bwbench.__all__ for alias in node.names), path.name
            if isinstance(node, ast.Import):
                assert all(not a.name.startswith("bwbench.") for a in node.names), path.name
