"""An RFC 6902 diff whose cost follows the change, not the document.

Publishing state means answering "what changed since the client last saw it?" many times
per run, often for a large document in which one leaf moved. `jsonpatch.make_patch`
answers by walking both documents in Python; here the walk descends only where C-level
`==` says two subtrees differ, so an unchanged subtree costs one C comparison (and nothing
at all when it is the very same object).

C-level `==` has one flaw for JSON: Python treats `True == 1`, `False == 0` and
`True == 1.0` as equal, so a bool swapped for a number deep inside a subtree would go
unseen. The fix lives in the *shadow*: the private copy of the last published document
that `StateManager` keeps. In a shadow every bool and every number equal to 0 or 1 is
replaced by a small marker whose `__eq__` is true only for the same kind of value
(`_Bool` only for the same bool, `_Num` only for equal non-bool numbers). Containers
still compare at C speed; only those leaves call back into Python. Everything else in a
shadow (strings, other numbers, None) is shared with the document it was built from: they
are immutable, and sharing them makes many comparisons identity hits.

Numbers are compared by value, so an int and a float with the same value (`1` and `1.0`)
count as the same JSON number and produce no operation, as RFC 6902's `test` would judge
them. Every other difference, including bool versus number, yields an operation.

Documents are JSON values: `dict` with `str` keys, `list`, `str`, `int`, `float`, `bool`,
`None`. Tuples and other types `orjson` can encode are accepted but compare unequal to
their JSON form, so they cost a Python-level look each time (and can add redundant
`replace` operations); keep states to plain JSON types, or use a pydantic model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import compress, count, filterfalse, islice, repeat
from operator import ne
from typing import Any, Final

import jsonpatch
import jsonpointer
import orjson

from ..errors import StatePatchError

__all__ = [
    "Edit",
    "JsonOp",
    "apply",
    "apply_edits",
    "diff",
    "diff_shadow",
    "dumps_shadow",
    "shadow",
    "unshadow",
]

JsonOp = dict[str, Any]
"""One RFC 6902 operation, e.g. `{"op": "replace", "path": "/a/0", "value": 1}`."""

Edit = tuple[Any, Any, int, Any]
"""`(container, key, action, value)`: one change to a shadow, found by `diff_shadow`.

`container` is the shadow's own dict or list (None for the root), so applying an edit needs
no pointer walk. `value` is the new document's object; `apply_edits` shadows it (copies it)
on the way in.
"""

_SET: Final = 0
_INSERT: Final = 1
_DELETE: Final = 2


# ── the markers ───────────────────────────────────────────────────────────────────


class _Bool:
    """A bool inside a shadow: equal to the same bool (or marker) only, never to 0 or 1."""

    __slots__ = ("value",)
    __hash__ = None  # type: ignore[assignment]  # JSON leaves are never hashed

    def __init__(self, value: bool) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return other is self.value or other is self

    def __ne__(self, other: object) -> bool:
        return not (other is self.value or other is self)

    def __repr__(self) -> str:
        return f"<shadow {self.value!r}>"

    # Markers are immutable, so jsonpatch's deep copies may share them.
    def __copy__(self) -> _Bool:
        return self

    def __deepcopy__(self, memo: object) -> _Bool:
        return self


class _Num:
    """A number equal to 0 or 1 inside a shadow: equal to numbers of that value, not bools."""

    __slots__ = ("value",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, value: int | float) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        kind = other.__class__
        if kind is int or kind is float:
            return other == self.value
        if kind is _Num:
            return self.value == other.value  # type: ignore[attr-defined,no-any-return]
        if kind is bool or kind is _Bool:
            return False
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        kind = other.__class__
        if kind is int or kind is float:
            return other != self.value
        if kind is _Num:
            return self.value != other.value  # type: ignore[attr-defined,no-any-return]
        if kind is bool or kind is _Bool:
            return True
        return NotImplemented

    def __repr__(self) -> str:
        return f"<shadow {self.value!r}>"

    def __copy__(self) -> _Num:
        return self

    def __deepcopy__(self, memo: object) -> _Num:
        return self


_TRUE: Final = _Bool(True)
_FALSE: Final = _Bool(False)
_INT_0: Final = _Num(0)
_INT_1: Final = _Num(1)


def _leaf(value: int | float) -> Any:
    """The shadow form of a number: a marker if it could be mistaken for a bool."""
    if value == 0 or value == 1:
        if value.__class__ is int:
            return _INT_1 if value else _INT_0
        return _Num(value)  # keeps 0.0, -0.0 and 1.0 as floats for re-encoding
    return value


# ── shadows ───────────────────────────────────────────────────────────────────────


def shadow(value: Any) -> Any:
    """Build the shadow of a JSON document: fresh containers, markers for bools and 0/1.

    The result shares no mutable object with `value`, so the caller may keep changing
    `value` in place. Values of other types are first turned into what `orjson` makes of
    them, the form the client receives.
    """
    kind = value.__class__
    if kind is dict:
        out: dict[str, Any] = {}
        for key, item in value.items():
            kind = item.__class__
            if kind is str or item is None:
                out[key] = item
            elif kind is bool:
                out[key] = _TRUE if item else _FALSE
            elif kind is int or kind is float:
                out[key] = _leaf(item)
            else:
                out[key] = shadow(item)
        return out
    if kind is list:
        items: list[Any] = []
        append = items.append
        for item in value:
            kind = item.__class__
            if kind is str or item is None:
                append(item)
            elif kind is bool:
                append(_TRUE if item else _FALSE)
            elif kind is int or kind is float:
                append(_leaf(item))
            else:
                append(shadow(item))
        return items
    if kind is str or value is None:
        return value
    if kind is bool:
        return _TRUE if value else _FALSE
    if kind is int or kind is float:
        return _leaf(value)
    if kind is _Bool or kind is _Num:
        return value
    return shadow(orjson.loads(orjson.dumps(value)))


def _unwrap(value: Any) -> Any:
    if value.__class__ is _Bool or value.__class__ is _Num:
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON")


def dumps_shadow(doc: Any) -> bytes:
    """Encode a shadow as compact JSON, exactly as the original document would be."""
    return orjson.dumps(doc, default=_unwrap)


def unshadow(doc: Any) -> Any:
    """A plain JSON copy of a shadow, owned by the caller."""
    return orjson.loads(dumps_shadow(doc))


# ── the diff ──────────────────────────────────────────────────────────────────────


class _Absent:
    """Stands for a missing member; never equal to anything but itself."""

    __slots__ = ()


_ABSENT: Final = _Absent()


def _token(key: Any) -> str:
    """Escape an object member name for a JSON Pointer (RFC 6901: `~` first, then `/`)."""
    if not isinstance(key, str):
        raise TypeError(f"JSON object keys must be strings, not {type(key).__name__}")
    if "~" in key or "/" in key:
        return key.replace("~", "~0").replace("/", "~1")
    return key


def diff_shadow(old: Any, new: Any) -> tuple[list[JsonOp], list[Edit]]:
    """Diff a shadow against a plain JSON document.

    Returns the RFC 6902 operations that turn the document `old` stands for into `new`
    (only `add`, `remove` and `replace`), and the matching edits that bring the shadow
    itself up to date (`apply_edits`). Both lists are empty when nothing changed.

    The operations' values are `new`'s own objects, not copies: encode them before `new`
    changes again.
    """
    ops: list[JsonOp] = []
    edits: list[Edit] = []
    # The root is entered without comparing it first: entering a container costs about
    # one comparison of it, so a comparison first would only double the work on a change.
    if old is not new and (old.__class__ is dict or old.__class__ is list or old != new):
        _diff(old, new, "", None, None, ops, edits)
    return ops, edits


# A `!=` on a container that turns out to differ is wasted work: entering it compares the
# same items again to find where. Entering a container costs about one C comparison per
# item, changed or not, so big containers (and the root) are entered directly; small ones
# are compared first, so that unchanged ones are never entered in Python.
_NARROW: Final = 8
"""Objects with at most this many members are looked at member by member in Python."""

_BIG: Final = 32
"""Containers with at least this many items are entered without comparing them first."""


def _diff(
    old: Any,
    new: Any,
    path: str,
    parent: Any,
    key: Any,
    ops: list[JsonOp],
    edits: list[Edit],
) -> None:
    """Record how `old` becomes `new`: they differ, or `old` is a container entered
    without comparing it first."""
    if old.__class__ is dict and isinstance(new, dict):
        _diff_dict(old, new, path, ops, edits)
    elif old.__class__ is list and isinstance(new, (list, tuple)):
        _diff_list(old, new, path, ops, edits)
    else:
        ops.append({"op": "replace", "path": path, "value": new})
        edits.append((parent, key, _SET, new))


def _diff_dict(
    old: dict[str, Any],
    new: dict[str, Any],
    path: str,
    ops: list[JsonOp],
    edits: list[Edit],
) -> None:
    same_keys = len(old) == len(new) and old.keys() == new.keys()
    if not same_keys:
        for key in filterfalse(new.__contains__, old):
            ops.append({"op": "remove", "path": f"{path}/{_token(key)}"})
            edits.append((old, key, _DELETE, None))
    get = old.get
    if len(new) <= _NARROW:
        # Few members (the usual top of a state): big ones are entered directly.
        for key, value in new.items():
            before = get(key, _ABSENT)
            if before is _ABSENT:
                ops.append({"op": "add", "path": f"{path}/{_token(key)}", "value": value})
                edits.append((old, key, _SET, value))
            elif before is not value:
                kind = before.__class__
                if ((kind is dict or kind is list) and len(before) >= _BIG) or before != value:
                    _diff(before, value, f"{path}/{_token(key)}", old, key, ops, edits)
        return
    # Many members: the candidates are found by C loops (map/compress), one `!=` per
    # member, which for an unchanged member is one C comparison of its whole subtree.
    if same_keys:
        getitem = old.__getitem__
        for key in compress(new, map(ne, map(getitem, new), new.values())):
            _diff(old[key], new[key], f"{path}/{_token(key)}", old, key, ops, edits)
        return
    for key in compress(new, map(ne, map(get, new, repeat(_ABSENT)), new.values())):
        before = get(key, _ABSENT)
        value = new[key]
        if before is _ABSENT:
            ops.append({"op": "add", "path": f"{path}/{_token(key)}", "value": value})
            edits.append((old, key, _SET, value))
        else:
            _diff(before, value, f"{path}/{_token(key)}", old, key, ops, edits)


def _first_difference(pairs: Iterable[bool], limit: int) -> int:
    """Index of the first true `!=` result among at most `limit` pairs, else `limit`."""
    return next(compress(count(), islice(pairs, limit)), limit)


def _diff_list(
    old: list[Any],
    new: list[Any] | tuple[Any, ...],
    path: str,
    ops: list[JsonOp],
    edits: list[Edit],
) -> None:
    # Not an LCS: the common prefix and suffix are matched (so appending, and removing or
    # inserting one item anywhere, stay small), and the middle is compared item by item,
    # with the surplus added or removed at its end.
    n_old, n_new = len(old), len(new)
    shorter = min(n_old, n_new)
    start = _first_difference(map(ne, old, new), shorter)
    if start == shorter and n_old == n_new:
        return
    tail = _first_difference(map(ne, reversed(old), reversed(new)), shorter - start)
    mid_old, mid_new = n_old - start - tail, n_new - start - tail
    common = min(mid_old, mid_new)
    end = start + common
    changed = compress(range(start, end), map(ne, old[start:end], new[start:end]))
    for index in changed:
        _diff(old[index], new[index], f"{path}/{index}", old, index, ops, edits)
    if mid_new > mid_old:
        for index in range(end, start + mid_new):
            value = new[index]
            ops.append({"op": "add", "path": f"{path}/{index}", "value": value})
            edits.append((old, index, _INSERT, value))
    else:
        # Highest index first, so each pointer still names the item it meant.
        for index in range(start + mid_old - 1, end - 1, -1):
            ops.append({"op": "remove", "path": f"{path}/{index}"})
            edits.append((old, index, _DELETE, None))


def apply_edits(root: Any, edits: Iterable[Edit]) -> Any:
    """Apply `diff_shadow`'s edits to the shadow they were computed on; returns the root.

    Inserted values are shadowed, so the shadow never aliases the caller's document. The
    cost is the size of the inserted values, not of the document.
    """
    for container, key, action, value in edits:
        if container is None:
            root = shadow(value)
        elif action == _SET:
            container[key] = shadow(value)
        elif action == _INSERT:
            container.insert(key, shadow(value))
        else:
            del container[key]
    return root


def diff(old: Any, new: Any) -> list[JsonOp]:
    """An RFC 6902 patch (`add`, `remove`, `replace`) that turns `old` into `new`.

    Exact for bools versus numbers; an int and a float of equal value count as the same
    number. This convenience builds a shadow of `old` (a Python pass over it); a caller
    that diffs repeatedly against the same base keeps the shadow and calls `diff_shadow`.
    The operations' values are `new`'s own objects.
    """
    return diff_shadow(shadow(old), new)[0]


# ── applying operations to a shadow ───────────────────────────────────────────────


def _shadow_op(op: Any) -> Any:
    if isinstance(op, Mapping):
        if "value" in op:
            return {**op, "value": shadow(op["value"])}
        return dict(op)
    return op  # jsonpatch rejects it with a proper message


def apply(doc: Any, ops: Iterable[Mapping[str, Any]]) -> Any:
    """Apply RFC 6902 operations (all six) to a shadow in place, atomically.

    Values the operations insert are shadowed first, so the shadow keeps its markers and
    never aliases the caller's operations. Returns the new root (a `""` path may replace
    it). On an invalid or inapplicable operation raises `StatePatchError` and leaves `doc`
    exactly as it was.
    """
    shadowed = [_shadow_op(op) for op in ops]
    try:
        patch = jsonpatch.JsonPatch(shadowed)
        return patch.apply(doc, in_place=True, atomic=True)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise StatePatchError(_patch_error_message(exc)) from exc


def _patch_error_message(exc: Exception) -> str:
    """A message naming the failing operation, with shadow markers shown as plain JSON."""
    op = getattr(exc, "op", None)
    operation = getattr(op, "operation", op)
    if isinstance(operation, Mapping):
        try:
            text = dumps_shadow(dict(operation)).decode()
        except TypeError:
            text = repr(operation)
        return f"the state patch does not apply: {exc} (operation {text})"
    return f"the state patch does not apply: {exc}"
