"""The CLI, the server and the operations reach other packages through their public
namespaces only (issue 15): never `from ..store._checkpoints import ...`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "tiller"
#: tiller-wide private modules, every package's to use (tests/test_layering.py's
#: `TILLER_WIDE`): not another package's internals.
TILLER_WIDE = {"_public", "_schema_ledger", "_task_stop"}


@pytest.mark.parametrize("package", ["cli", "serve", "ops"])
def test_no_import_of_another_packages_private_module(package: str) -> None:
    reached = []
    for path in sorted((SRC / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            private = (
                isinstance(node, ast.ImportFrom)
                and node.level >= 2
                and node.module not in TILLER_WIDE
                and any(part.startswith("_") for part in (node.module or "").split("."))
            )
            if private:
                assert isinstance(node, ast.ImportFrom)
                reached.append(f"{path.relative_to(SRC)}:{node.lineno} ..{node.module}")
    assert reached == []
