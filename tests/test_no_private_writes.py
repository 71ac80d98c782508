"""No collaborator writes another's private state (issue 15).

A class's `_attributes` are its own: another class (or a module function) that assigns
one, deletes one, or mutates one in place (`other._items.append(...)`) couples itself to
that class's insides, and the owner can no longer keep its invariants. The owner offers a
method instead (`Loop.history_rewritten`, `AgUiContext._handle_opened`). Privacy is per
class, as in most languages: a method of `C` may write `_a` on another `C` (a copy being
built, a token cancelling its children) when `C` itself keeps an `_a`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tiller"

#: In-place mutators of the builtin containers a private attribute usually holds.
MUTATORS = frozenset(
    {
        "add",
        "append",
        "clear",
        "discard",
        "extend",
        "insert",
        "pop",
        "popitem",
        "remove",
        "reverse",
        "setdefault",
        "sort",
        "update",
    }
)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own_attributes(cls: ast.ClassDef) -> set[str]:
    """The private attributes a class keeps: assigned on `self`, or declared (slots,
    annotations in its body)."""
    own: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "self" and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
    return {name for name in own if _private(name)}


def _leaves(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        return [leaf for element in target.elts for leaf in _leaves(element)]
    if isinstance(target, ast.Starred):
        return _leaves(target.value)
    while isinstance(target, ast.Subscript):
        target = target.value
    return [target]


def _written(node: ast.AST) -> list[ast.Attribute]:
    """The attributes `node` writes: assigned, deleted, or mutated in place."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign | ast.Delete):
        targets = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in MUTATORS
    ):
        targets = [node.func.value]
    leaves = [leaf for target in targets for leaf in _leaves(target)]
    return [leaf for leaf in leaves if isinstance(leaf, ast.Attribute)]


def violations(source: str) -> list[str]:
    """`line: expression` for each write of another's private attribute in `source`."""
    found: list[str] = []

    def visit(node: ast.AST, own: set[str]) -> None:
        if isinstance(node, ast.ClassDef):
            own = _own_attributes(node)
        for attribute in _written(node):
            base = attribute.value
            if not _private(attribute.attr):
                continue
            if isinstance(base, ast.Name) and base.id in {"self", "cls"}:
                continue
            if attribute.attr in own:
                continue  # the class's own attribute, on another of its instances
            found.append(f"{attribute.lineno}: {ast.unparse(attribute)}")
        for child in ast.iter_child_nodes(node):
            visit(child, own)

    visit(ast.parse(source), set())
    return found


def test_no_module_writes_another_s_private_state() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{where}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for where in violations(path.read_text())
    ]
    assert not found, "writes of another object's private state:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("def f(loop):\n    loop._transcript = None\n", ["2: loop._transcript"]),
        ("def f(loop):\n    loop._offset += 1\n", ["2: loop._offset"]),
        (
            "class S:\n    def f(self):\n        self._parent._held.update({})\n",
            ["3: self._parent._held"],
        ),
        ("def f(ctx):\n    ctx._open[1] = 2\n", ["2: ctx._open"]),
        ("def f(ctx):\n    del ctx._open\n", ["2: ctx._open"]),
        ("class C:\n    def f(self):\n        self._x = 1\n", []),
        (
            "class C:\n    def __init__(self):\n        self._x = 1\n"
            "    def copy(self):\n        other = C()\n        other._x = self._x\n",
            [],
        ),
        ("def f(ctx):\n    ctx.public = 1\n    ctx._emit(1)\n", []),
    ],
)
def test_the_check_finds_what_it_should(source: str, found: list[str]) -> None:
    assert violations(source) == found
