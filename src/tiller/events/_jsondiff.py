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

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from itertools import accumulate, compress, count, filterfalse, islice, repeat
from operator import ne
from typing import Any, Final

import jsonpatch
import jsonpointer
import orjson

from ..errors import StatePatchError

__all__ = [
    "Edit",
    "Index",
    "JsonOp",
    "apply",
    "apply_edits",
    "diff",
    "diff_encoded",
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
    found = _Diff()
    # The root is entered without comparing it first: entering a container costs about
    # one comparison of it, so a comparison first would only double the work on a change.
    if old is not new and (old.__class__ is dict or old.__class__ is list or old != new):
        found.diff_value(old, new, "", None, None)
    return found.ops, found.edits


# A `!=` on a container that turns out to differ is wasted work: entering it compares the
# same items again to find where. Entering a container costs about one C comparison per
# item, changed or not, so big containers (and the root) are entered directly; small ones
# are compared first, so that unchanged ones are never entered in Python.
_NARROW: Final = 8
"""Objects with at most this many members are looked at member by member in Python."""

_BIG: Final = 32
"""Containers with at least this many items are entered without comparing them first."""


class _Diff:
    """One diff's findings, the operations and the shadow's edits, and the walk that
    finds them.

    The recursive walk is this object's methods, so that each call passes only the values
    compared and where they sit (the path, and the shadow's container and key).
    """

    __slots__ = ("edits", "ops")

    def __init__(self) -> None:
        self.ops: list[JsonOp] = []
        self.edits: list[Edit] = []

    def diff_value(self, old: Any, new: Any, path: str, parent: Any, key: Any) -> None:
        """Record how `old` becomes `new`: they differ, or `old` is a container entered
        without comparing it first."""
        if old.__class__ is dict and isinstance(new, dict):
            self.diff_object(old, new, path)
        elif old.__class__ is list and isinstance(new, (list, tuple)):
            # Not an LCS: the common prefix and suffix are matched (so appending, and
            # removing or inserting one item anywhere, stay small), and the middle is
            # compared item by item, with the surplus added or removed at its end.
            self.diff_array(old, new, 0, 0, path)
        else:
            self.ops.append({"op": "replace", "path": path, "value": new})
            self.edits.append((parent, key, _SET, new))

    def diff_object(self, old: dict[str, Any], new: dict[str, Any], path: str) -> None:
        """Diff two objects that differ (or were not compared)."""
        same_keys = len(old) == len(new) and old.keys() == new.keys()
        if not same_keys:
            for key in filterfalse(new.__contains__, old):
                self.ops.append({"op": "remove", "path": f"{path}/{_token(key)}"})
                self.edits.append((old, key, _DELETE, None))
        get = old.get
        if len(new) <= _NARROW:
            # Few members (the usual top of a state): big ones are entered directly.
            for key, value in new.items():
                before = get(key, _ABSENT)
                if before is _ABSENT:
                    self.ops.append({"op": "add", "path": f"{path}/{_token(key)}", "value": value})
                    self.edits.append((old, key, _SET, value))
                elif before is not value:
                    kind = before.__class__
                    if ((kind is dict or kind is list) and len(before) >= _BIG) or (
                        before != value
                    ):
                        self.diff_value(before, value, f"{path}/{_token(key)}", old, key)
            return
        # Many members: the candidates are found by C loops (map/compress), one `!=` per
        # member, which for an unchanged member is one C comparison of its whole subtree.
        if same_keys:
            getitem = old.__getitem__
            for key in compress(new, map(ne, map(getitem, new), new.values())):
                self.diff_value(old[key], new[key], f"{path}/{_token(key)}", old, key)
            return
        for key in compress(new, map(ne, map(get, new, repeat(_ABSENT)), new.values())):
            before = get(key, _ABSENT)
            value = new[key]
            if before is _ABSENT:
                self.ops.append({"op": "add", "path": f"{path}/{_token(key)}", "value": value})
                self.edits.append((old, key, _SET, value))
            else:
                self.diff_value(before, value, f"{path}/{_token(key)}", old, key)

    def diff_array(
        self, old: list[Any], new: list[Any] | tuple[Any, ...], start: int, tail: int, path: str
    ) -> None:
        """Diff two arrays known to agree on their first `start` and last `tail` items."""
        n_old, n_new = len(old), len(new)
        shorter = min(n_old, n_new) - tail
        start += _first_difference(
            map(ne, islice(old, start, None), islice(new, start, None)), shorter - start
        )
        if start == shorter and n_old == n_new:
            return
        tail += _first_difference(
            map(ne, islice(reversed(old), tail, None), islice(reversed(new), tail, None)),
            shorter - start,
        )
        mid_old, mid_new = n_old - start - tail, n_new - start - tail
        common = min(mid_old, mid_new)
        end = start + common
        changed = compress(range(start, end), map(ne, old[start:end], new[start:end]))
        for index in changed:
            self.diff_value(old[index], new[index], f"{path}/{index}", old, index)
        if mid_new > mid_old:
            for index in range(end, start + mid_new):
                value = new[index]
                self.ops.append({"op": "add", "path": f"{path}/{index}", "value": value})
                self.edits.append((old, index, _INSERT, value))
        else:
            # Highest index first, so each pointer still names the item it meant.
            for index in range(start + mid_old - 1, end - 1, -1):
                self.ops.append({"op": "remove", "path": f"{path}/{index}"})
                self.edits.append((old, index, _DELETE, None))

    def diff_members(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        gone: Iterable[str],
        members: Iterable[tuple[str, Any]],
        path: str,
    ) -> None:
        """Diff some members of two objects: `gone` holds every name of `old` that may be
        missing from `new`, `members` every member of `new` that may differ from `old`."""
        for key in gone:
            if key not in new:
                self.ops.append({"op": "remove", "path": f"{path}/{_token(key)}"})
                self.edits.append((old, key, _DELETE, None))
        get = old.get
        for key, value in members:
            before = get(key, _ABSENT)
            if before is _ABSENT:
                self.ops.append({"op": "add", "path": f"{path}/{_token(key)}", "value": value})
                self.edits.append((old, key, _SET, value))
            elif before is not value and before != value:
                self.diff_value(before, value, f"{path}/{_token(key)}", old, key)


def _first_difference(pairs: Iterable[bool], limit: int) -> int:
    """Index of the first true `!=` result among at most `limit` pairs, else `limit`."""
    return next(compress(count(), islice(pairs, limit)), limit)


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


# ── the byte-guided diff ──────────────────────────────────────────────────────────
#
# `StateManager` encodes every state it publishes, and keeps the encoding it last sent.
# Two encodings compared byte for byte (C `memcmp`) give the common prefix and suffix; the
# change lies between them. With the encoded length of each member of the containers on
# the way down (an `Index`, kept from publish to publish), that byte range names the
# members that changed, so the diff descends straight to them and compares nothing else.
#
# Why bytes that agree name members that agree (O: the old encoding, N: the new one):
# - Head. A member whose bytes and trailing delimiter (`,` or the closing bracket) lie in
#   the common prefix reads the same in N as in O: a parser reading left to right is in
#   the same state after the same bytes.
# - Tail. Let y in the common suffix hold a structural `,`, `[` or `{` of O. Since O[y] is
#   no backslash, every quote after y is escaped in N exactly when it is in O, so from y
#   to the end the unescaped quotes toggle "inside a string" the same number of times in
#   both. Both documents end outside a string, so N[y + shift] is outside one too, and the
#   brackets and separators after it match one for one: the members after y are the same
#   members of the same containers. (So the rule below asks for a member's *preceding*
#   delimiter to lie in the suffix, not only its bytes.)
# - Bytes are type-exact (`true` is not `1`, `1` is not `1.0`), so equal bytes are equal
#   JSON values; different bytes may still be equal values (`1` versus `1.0`, member
#   order), which the diff of what is left sorts out.


def _prefix_length(old: bytes, new: bytes) -> int:
    """The length of the longest common prefix: a binary search of C comparisons."""
    low, high = 0, min(len(old), len(new))
    view = memoryview(old)
    startswith = new.startswith
    while low < high:
        middle = (low + high + 1) >> 1
        if startswith(view[low:middle], low):
            low = middle
        else:
            high = middle - 1
    return low


def _suffix_length(old: bytes, new: bytes, limit: int) -> int:
    """The length of the longest common suffix, at most `limit`."""
    low, high = 0, limit
    n_old, n_new = len(old), len(new)
    view = memoryview(old)
    endswith = new.endswith
    while low < high:
        middle = (low + high + 1) >> 1
        if endswith(view[n_old - middle : n_old - low], 0, n_new - low):
            low = middle
        else:
            high = middle - 1
    return low


class Index:
    """The encoded layout of one object or array of the last published encoding.

    `lengths[m]` is the length of member `m` (`"name":value` or the item) plus its
    trailing delimiter; `names` lists an object's member names in encoding order (None
    for arrays); `children[m]` is the index of member `m` when it was needed (else None).
    `ends` (running sums of `lengths` from the front) and `tails` (from the back) are kept
    for bisection and are valid for their first `ends_ok` and `tails_ok` entries.
    """

    __slots__ = ("children", "ends", "ends_ok", "lengths", "names", "tails", "tails_ok")

    def __init__(self, lengths: list[int], names: list[str] | None) -> None:
        self.lengths = lengths
        self.names = names
        self.children: list[Index | None] = [None] * len(lengths)
        self.ends: list[int] = []
        self.ends_ok = 0
        self.tails: list[int] = []
        self.tails_ok = 0

    def head(self, limit: int) -> int:
        """How many leading members end (delimiter included) before offset `limit`.

        Afterwards `ends` is valid at least up to the returned index.
        """
        count = bisect_left(self.ends, limit, 0, self.ends_ok)
        if count == self.ends_ok and count < len(self.lengths):
            # Usually the member at `count` is the one that changed last time: extend the
            # running sums by it alone before summing everything again.
            end = (self.ends[count - 1] if count else 0) + self.lengths[count]
            if count < len(self.ends):
                self.ends[count] = end
            else:
                self.ends.append(end)
            self.ends_ok = count + 1
            if end >= limit:
                return count
            self.ends = list(accumulate(self.lengths))
            self.ends_ok = len(self.lengths)
            count = bisect_left(self.ends, limit)
        return count

    def tail(self, limit: int) -> int:
        """How many trailing members start (preceding delimiter included) at most
        `limit` bytes before the closing bracket.

        Afterwards `tails` is valid at least up to the returned index.
        """
        count = bisect_right(self.tails, limit, 0, self.tails_ok)
        if count == self.tails_ok and count < len(self.lengths):
            tail = (self.tails[count - 1] if count else 0) + self.lengths[-1 - count]
            if count < len(self.tails):
                self.tails[count] = tail
            else:
                self.tails.append(tail)
            self.tails_ok = count + 1
            if tail > limit:
                return count
            self.tails = list(accumulate(reversed(self.lengths)))
            self.tails_ok = len(self.lengths)
            count = bisect_right(self.tails, limit)
        return count

    def resize(self, member: int, change: int) -> None:
        """Member `member` grew by `change` bytes."""
        self.lengths[member] += change
        self.ends_ok = min(self.ends_ok, member)
        self.tails_ok = min(self.tails_ok, len(self.lengths) - 1 - member)

    def splice(self, start: int, stop: int, lengths: list[int], names: list[str] | None) -> None:
        """Members `start:stop` became members with these `lengths` (and `names`)."""
        after = len(self.lengths) - stop
        self.lengths[start:stop] = lengths
        if self.names is not None and names is not None:
            self.names[start:stop] = names
        self.children[start:stop] = [None] * len(lengths)
        self.ends_ok = min(self.ends_ok, start)
        self.tails_ok = min(self.tails_ok, after)


def _size_hint(value: Any) -> int:
    kind = value.__class__
    return len(value) if kind is dict or kind is list or kind is str else 0


def _measure(items: Iterable[Any]) -> list[int]:
    return [len(orjson.dumps(item)) + 1 for item in items]


def _measure_members(members: Iterable[tuple[str, Any]]) -> list[int]:
    dumps = orjson.dumps
    return [len(dumps(name)) + len(dumps(value)) + 2 for name, value in members]


def _build(value: dict[str, Any] | list[Any], size: int) -> Index | None:
    """The index of a container whose encoding (brackets included) is `size + 1` bytes.

    Every member is encoded once, except the one that looks biggest, whose length is what
    is left: usually the one holding the change, whose encoding is the costly one.
    """
    if not value:
        return Index([], [] if value.__class__ is dict else None) if size == 1 else None
    hints = list(map(_size_hint, value.values() if value.__class__ is dict else value))
    biggest = hints.index(max(hints))
    if value.__class__ is dict:
        members = list(value.items())
        names: list[str] | None = [name for name, _ in members]
        lengths = _measure_members(members[:biggest])
        rest = _measure_members(members[biggest + 1 :])
    else:
        names = None
        lengths = _measure(value[:biggest])  # type: ignore[index]
        rest = _measure(value[biggest + 1 :])  # type: ignore[index]
    left = size - sum(lengths) - sum(rest)
    if left < 2:
        return None
    lengths.append(left)
    lengths += rest
    return Index(lengths, names)


class _Inconsistent(Exception):
    """The index does not describe the old encoding: diff the whole document instead."""


_OPENERS: Final = {dict: ord("{"), list: ord("[")}
_CLOSERS: Final = {dict: ord("}"), list: ord("]")}


def diff_encoded(
    root: Any, new: Any, before: bytes, after: bytes, index: Index | None
) -> tuple[list[JsonOp], list[Edit], Index | None] | None:
    """Like `diff_shadow`, guided by the two documents' compact encodings.

    `before` is an `orjson` encoding of the document the shadow `root` stands for, `index`
    its layout (or None, then it is built as needed) and `after` is `orjson.dumps(new)`;
    they differ. Only the members whose bytes changed are compared, so the cost is the
    two byte comparisons plus the size of the change. Returns the operations, the edits
    and the index of `after` (None if it could not be kept); or None when this way does
    not apply (e.g. a root that is no container), in which case `diff_shadow` does.
    """
    kind = new.__class__
    if (kind is not dict and kind is not list) or root.__class__ is not kind:
        return None
    fresh = index is None  # a fresh index describes `after`, not `before`
    if index is None:
        index = _build(new, len(after) - 1)
        if index is None:
            return None
    walk = _GuidedDiff(root, new, before, after, index, fresh=fresh)
    try:
        kept = walk.run()
    except _Inconsistent:
        return None
    if not kept:
        return walk.ops, walk.edits, None  # the operations stand; the index does not
    for parent, member in walk.trail:
        parent.resize(member, walk.shift)
    return walk.ops, walk.edits, index


class _GuidedDiff(_Diff):
    """A byte-guided diff under way: the container it stands in, in both documents, in
    both encodings and in the index.

    `start` and `end` are the container's brackets in `before`; `trail` lists the members
    on the way down, in indexes of `before` (their lengths change by `shift` at the end).
    `fresh` says that `node` describes `after`, not `before` (it was built this time).
    """

    __slots__ = (
        "after",
        "before",
        "end",
        "fresh",
        "new",
        "node",
        "old",
        "path",
        "prefix",
        "shift",
        "start",
        "suffix_start",
        "trail",
    )

    def __init__(
        self, root: Any, new: Any, before: bytes, after: bytes, index: Index, *, fresh: bool
    ) -> None:
        super().__init__()
        self.before, self.after = before, after
        self.prefix = _prefix_length(before, after)
        suffix = _suffix_length(before, after, min(len(before), len(after)) - self.prefix)
        self.suffix_start = len(before) - suffix  # where the common suffix begins in `before`
        self.shift = len(after) - len(before)
        self.node, self.old, self.new = index, root, new
        self.start, self.end = 0, len(before) - 1
        self.path = ""
        self.fresh = fresh
        self.trail: list[tuple[Index, int]] = []

    def run(self) -> bool:
        """Go down while a single member changed, then diff what changed there.

        Returns False when the operations stand but the index could not be kept; raises
        `_Inconsistent` when the index does not describe `before`.
        """
        while True:
            head, tail, key = self._changed_member()
            if key is _ABSENT:
                # Several members changed (or one changed its name or kind): diff them.
                return self._diff_between(head, tail)
            if not self._enter(head, tail, key):
                self._diff_member(head, key)
                return True

    def _changed_member(self) -> tuple[int, int, Any]:
        """How many leading members lie in the common prefix, and trailing ones in the
        common suffix; and the key of the one member between them, when both documents
        have exactly one there and it is the same member (not renamed), else `_ABSENT`."""
        node, old, new = self.node, self.old, self.new
        n_old, n_new = len(old), len(new)
        if len(node.lengths) != (n_new if self.fresh else n_old):
            raise _Inconsistent
        head = node.head(self.prefix - self.start)
        tail = node.tail(self.end - self.suffix_start)
        if head + tail > min(n_old, n_new):
            raise _Inconsistent
        if not n_old - head - tail == 1 == n_new - head - tail:
            return head, tail, _ABSENT
        if new.__class__ is not dict:
            return head, tail, head
        key = next(islice(new, head, None))
        if not self.fresh and node.names[head] != key:  # type: ignore[index]
            return head, tail, _ABSENT  # renamed: not the same member
        return head, tail, key if key in old else _ABSENT

    def _enter(self, head: int, tail: int, key: Any) -> bool:
        """Go down into the changed member if it is a container both times (else False):
        its brackets in both encodings, its index, its path."""
        before_value, value = self.old[key], self.new[key]
        kind = value.__class__
        if (kind is not dict and kind is not list) or before_value.__class__ is not kind:
            return False
        node, is_dict = self.node, self.new.__class__ is dict
        opening = self.start + 1 + (node.ends[head - 1] if head else 0)
        if is_dict:
            opening += len(orjson.dumps(key)) + 1
        closing = self.end - (node.tails[tail - 1] if tail else 0) - 1
        before, after = self.before, self.after
        if not (
            before[opening] == after[opening] == _OPENERS[kind]
            and before[closing] == after[closing + self.shift] == _CLOSERS[kind]
        ):
            raise _Inconsistent
        if not self.fresh:
            self.trail.append((node, head))
        child = node.children[head]
        if child is None:
            child = _build(value, closing + self.shift - opening)
            if child is None:
                raise _Inconsistent
            node.children[head] = child
            self.fresh = True
        self.node, self.old, self.new = child, before_value, value
        self.start, self.end = opening, closing
        self.path = f"{self.path}/{_token(key) if is_dict else key}"
        return True

    def _diff_member(self, head: int, key: Any) -> None:
        """Diff the one changed member, a leaf (or a container that changed kind); its
        index, if any, no longer applies."""
        old, new = self.old, self.new
        before_value, value = old[key], new[key]
        if before_value is not value and before_value != value:
            token = _token(key) if new.__class__ is dict else key
            self.diff_value(before_value, value, f"{self.path}/{token}", old, key)
        if not self.fresh:
            self.trail.append((self.node, head))
            self.node.children[head] = None

    def _diff_between(self, head: int, tail: int) -> bool:
        """Diff the members between the unchanged ends, and put their new lengths in the
        index; False if those do not add up to the change in bytes."""
        old, new, node = self.old, self.new, self.node
        n_old, n_new = len(old), len(new)
        stop_old, stop_new = n_old - tail, n_new - tail
        names: list[str] | None = None
        if new.__class__ is dict:
            members = list(islice(new.items(), head, stop_new))
            gone = list(old) if self.fresh else node.names[head:stop_old]  # type: ignore[index]
            self.diff_members(old, new, gone, members, self.path)
            if self.fresh:
                return True
            lengths = _measure_members(members)
            names = [name for name, _ in members]
        else:
            self.diff_array(old, new, head, tail, self.path)
            if self.fresh:
                return True
            lengths = _measure(new[head:stop_new])
        # An empty container is 2 bytes, not 1 + the sum of no lengths.
        grown = sum(lengths) + (n_new == 0) - (n_old == 0)
        if grown != sum(node.lengths[head:stop_old]) + self.shift:
            return False
        node.splice(head, stop_old, lengths, names)
        return True


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
