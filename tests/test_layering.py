"""The import graph keeps DESIGN §5's order (docs/design.md §5).

Dependencies point downward::

    front door (tiller/__init__.py, __main__)
    cli, serve, pytest_plugin
    ops, fleet, evals, config, pinned_policy, testing, examples
    loop
    tools, policy, model, events, store, telemetry, capture
    conversation, state, ids, cancel, phase
    errors

plus three rules inside one layer: `events` knows nothing of models or tools, `model`
knows nothing of tools' code, and `store` knows nothing of the loop (the last one is
already the layer order). A package may import its own private modules freely; another
package's private modules (`tiller.store._records`, `from ..model._codec import ...`) are
never imported: the public namespace, or its `# For tiller's own packages` re-exports, is
the door. Imports under `if TYPE_CHECKING:` count: they couple the code all the same.

Where the top-level modules sit, and why:

- `errors` is the bottom: every layer raises `TillerError`s and it imports nothing.
  Beside it sit the three tiller-wide private modules, `_public` (which names the front
  door re-exports, so each home namespace can report `tiller` as their module),
  `_schema_ledger` (every record kind's schema versions) and `_task_stop` (stopping a
  background task without swallowing the stopper's cancellation, law 8): they import
  nothing of tiller but `errors`, and every package may import them, as pydantic's
  packages import `pydantic._internal`.
- `phase` sits with `state`: a phase is a plain value the run's state records.
- `capture` is the record format of a model call (written by the loop's sink, read by
  `model.replay`, stored in a store bucket): a peer of `model` and `store`.
- `config` and `pinned_policy` read `tiller.toml` into the loop's and policy's values:
  they compose the loop, like `ops`.
- `testing` and `examples` are users' code over the loop: they compose it too.
- `pytest_plugin` is an entry point (pytest loads it), like `cli` and `serve`.
- `tiller/__init__.py` is the front door and `__main__` runs the CLI: the top. The one name
  a lower module may take from the root is `__version__`: the version lives in one place,
  and the root package is always imported before any of its submodules.

The allow-lists below are today's violations in files other parts of issue 15 restructure;
each names the part that clears it, and the test fails once an allowed import is gone, so
the lists only shrink.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "tiller"

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "_public", "_schema_ledger", "_task_stop"}),
    frozenset({"conversation", "state", "ids", "cancel", "phase"}),
    frozenset({"tools", "policy", "model", "events", "store", "telemetry", "capture"}),
    frozenset({"loop"}),
    frozenset({"ops", "fleet", "evals", "config", "pinned_policy", "testing", "examples"}),
    frozenset({"cli", "serve", "pytest_plugin"}),
    frozenset({"__init__", "__main__"}),
)

#: Same-layer imports that DESIGN §5 forbids: (importer, imported).
FORBIDDEN_WITHIN_LAYER = frozenset(
    {("events", "model"), ("events", "tools"), ("model", "tools"), ("store", "loop")}
)

#: Top-level private modules every package may import (see the module docstring).
TILLER_WIDE = frozenset({"tiller._public", "tiller._schema_ledger", "tiller._task_stop"})

#: The demo's example project is a user's code under test, not tiller's.
SKIPPED = (PACKAGE / "examples" / "invoice_project",)


@dataclass(frozen=True)
class Import:
    """One import in one module: `importer` (a module path relative to src/tiller, such as
    `store/_control.py`) imports the module `target` (dotted, `tiller.loop._steering`)."""

    importer: str
    target: str
    name: str | None  # the name taken from `target`, when it is not a module itself

    def __str__(self) -> str:
        return f"{self.importer} -> {self.target}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _resolve(path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(path: Path, source: str | None = None) -> list[Import]:
    """Every tiller import in the module at `path` (`source` stands in for its text)."""
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    importer = path.relative_to(PACKAGE).as_posix()
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(importer, a.name, None) for a in node.names if _ours(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(path, node)
            if not _ours(module):
                continue
            for alias in node.names:
                dotted = f"{module}.{alias.name}"
                if _is_module(dotted):
                    found.append(Import(importer, dotted, None))
                else:
                    found.append(Import(importer, module, alias.name))
    return found


def _ours(module: str) -> bool:
    return module == "tiller" or module.startswith("tiller.")


def _unit(dotted_or_path: str) -> str:
    """The package or top-level module a module belongs to (`store`, `capture`, `__init__`)."""
    parts = dotted_or_path.removesuffix(".py").replace("/", ".").split(".")
    if parts[0] == "tiller":
        parts = parts[1:]
    return parts[0] if parts else "__init__"


def _layer(unit: str) -> int:
    for index, layer in enumerate(LAYERS):
        if unit in layer:
            return index
    raise AssertionError(f"{unit!r} has no layer: place it in LAYERS and say why above")


def violations(found: list[Import]) -> tuple[set[str], set[str]]:
    """(upward imports, imports of another package's private module), as `str(Import)`."""
    upward: set[str] = set()
    private: set[str] = set()
    for imp in found:
        source, target = _unit(imp.importer), _unit(imp.target)
        if source == target:
            continue
        if target == "__init__" and imp.name == "__version__":
            continue  # the one name any module may take from the root (see above)
        if _layer(target) > _layer(source) or (source, target) in FORBIDDEN_WITHIN_LAYER:
            upward.add(str(imp))
        if imp.target in TILLER_WIDE:
            continue
        if any(part.startswith("_") for part in imp.target.split(".")[1:]):
            private.add(str(imp))
    return upward, private


def _modules() -> list[Path]:
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if not any(path.is_relative_to(skipped) for skipped in SKIPPED)
    ]


#: Exceptions to the two rules below. None are left (issue 15 cleared the last, with the
#: store's durability port and `tiller.ops`); an entry added here needs a reason and an
#: issue that takes it away.
ALLOWED_UPWARD: frozenset[str] = frozenset()
ALLOWED_PRIVATE: frozenset[str] = frozenset()


def _all_violations() -> tuple[set[str], set[str]]:
    found: list[Import] = []
    for path in _modules():
        found += imports_of(path)
    return violations(found)


def test_no_upward_import() -> None:
    upward, _ = _all_violations()
    new = sorted(upward - ALLOWED_UPWARD)
    assert not new, "imports against DESIGN §5's order:\n" + "\n".join(new)


def test_no_cross_package_private_import() -> None:
    _, private = _all_violations()
    new = sorted(private - ALLOWED_PRIVATE)
    assert not new, "imports of another package's private module:\n" + "\n".join(new)


def test_allow_lists_only_shrink() -> None:
    upward, private = _all_violations()
    gone = sorted((ALLOWED_UPWARD - upward) | (ALLOWED_PRIVATE - private))
    assert not gone, "no longer there; remove from the allow-list:\n" + "\n".join(gone)


def test_every_unit_has_a_layer() -> None:
    units = {_unit(path.relative_to(PACKAGE).as_posix()) for path in _modules()}
    for unit in units:
        _layer(unit)


@pytest.mark.parametrize(
    ("where", "source", "upward", "private"),
    [
        ("store/_planted.py", "from ..loop import Agent\n", True, False),
        ("events/_planted.py", "from ..model import Model\n", True, False),
        ("tools/_planted.py", "from ..store._records import Record\n", False, True),
        ("cli/_planted.py", "import tiller.model._codec\n", False, True),
        ("state.py", "from tiller.loop._run import Loop\n", True, True),
        (
            "model/_planted.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..tools import Tool\n",
            True,
            False,
        ),
        ("loop/_planted.py", "from ..store import Bus\nfrom ._run import Loop\n", False, False),
        ("tools/_planted.py", "from .. import __version__\n", False, False),
    ],
)
def test_a_planted_violation_is_found(where: str, source: str, upward: bool, private: bool) -> None:
    found_upward, found_private = violations(imports_of(PACKAGE / where, source))
    assert bool(found_upward) is upward
    assert bool(found_private) is private
