"""The state diff: exact RFC 6902 patches, bools kept apart from numbers, and no look at
subtrees that did not change."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiller.errors import StatePatchError, UsageError
from tiller.events._jsondiff import (
    Index,
    apply,
    apply_edits,
    diff,
    diff_encoded,
    diff_shadow,
    dumps_shadow,
    shadow,
    unshadow,
)

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True)

# ── strategies and helpers (test_state.py imports nothing from here: module names in
# tests/ must stay independent) ─────────────────────────────────────────────────────

KEYS = st.one_of(
    st.sampled_from(["a", "b", "c", "", "/", "~", "a/b", "~0", "~1", "0", "-", "~/"]),
    st.text(max_size=4),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from([0.0, -0.0, 1.0, 0.5]),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
)
JSON = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=30,
)


def strict_equal(a: Any, b: Any) -> bool:
    """JSON equality that keeps bools apart from numbers (ints and floats of equal value
    are the same JSON number, as documented) and ignores object member order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(strict_equal(a[k], b[k]) for k in a)
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    return type(a) is type(b) and a == b


@st.composite
def edited(draw: st.DrawFn, doc: Any, depth: int = 0) -> Any:
    """A copy of `doc` with a few random changes, sharing the untouched parts."""
    action = draw(st.sampled_from(["descend", "descend", "replace", "grow", "shrink", "flip"]))
    if action == "flip":
        if doc is True or doc is False:
            return int(doc)  # the same value as a number: only a type-strict diff sees it
        if doc.__class__ is int and doc in (0, 1):
            return bool(doc)
    if action == "replace" or not isinstance(doc, (dict, list)) or depth > 6:
        return draw(JSON)
    if isinstance(doc, dict):
        out = dict(doc)
        if action == "grow" or not out:
            out[draw(KEYS)] = draw(JSON)
        elif action == "shrink":
            del out[draw(st.sampled_from(sorted(out)))]
        else:
            for key in draw(st.lists(st.sampled_from(sorted(out)), min_size=1, max_size=3)):
                out[key] = draw(edited(out[key], depth + 1))
        return out
    items = list(doc)
    if action == "grow" or not items:
        items.insert(draw(st.integers(0, len(items))), draw(JSON))
    elif action == "shrink":
        del items[draw(st.integers(0, len(items) - 1))]
    else:
        for index in draw(st.lists(st.integers(0, len(items) - 1), min_size=1, max_size=3)):
            items[index] = draw(edited(items[index], depth + 1))
    return items


@st.composite
def doc_pairs(draw: st.DrawFn) -> tuple[Any, Any]:
    old = draw(JSON)
    if draw(st.booleans()):
        return old, draw(edited(old))
    return old, draw(JSON)


def check_patch(old: Any, new: Any, ops: list[dict[str, Any]]) -> None:
    assert all(op["op"] in ("add", "remove", "replace") for op in ops)
    result = jsonpatch.apply_patch(copy.deepcopy(old), orjson.loads(orjson.dumps(ops)))
    assert strict_equal(result, new), (old, new, ops, result)


# ── properties ──────────────────────────────────────────────────────────────────


@SETTINGS
@given(doc_pairs())
def test_diff_turns_old_into_new_exactly(pair: tuple[Any, Any]) -> None:
    old, new = pair
    check_patch(old, new, diff(old, new))


@SETTINGS
@given(JSON)
def test_equal_documents_give_an_empty_patch(doc: Any) -> None:
    assert diff(doc, doc) == []
    assert diff(doc, copy.deepcopy(doc)) == []
    assert diff(doc, orjson.loads(orjson.dumps(doc))) == []


@SETTINGS
@given(doc_pairs())
def test_edits_bring_the_shadow_to_the_new_document(pair: tuple[Any, Any]) -> None:
    old, new = pair
    root = shadow(old)
    _, edits = diff_shadow(root, new)
    root = apply_edits(root, edits)
    assert strict_equal(unshadow(root), new)
    assert diff_shadow(root, new) == ([], [])  # the shadow now stands for `new`


@SETTINGS
@given(JSON)
def test_shadow_round_trips_and_encodes_like_the_original(doc: Any) -> None:
    root = shadow(doc)
    assert dumps_shadow(root) == orjson.dumps(doc)
    assert strict_equal(unshadow(root), doc)


@SETTINGS
@given(doc_pairs())
def test_apply_matches_jsonpatch(pair: tuple[Any, Any]) -> None:
    old, new = pair
    ops = jsonpatch.make_patch(old, new).patch  # also uses move and copy
    expected = jsonpatch.apply_patch(copy.deepcopy(old), ops)
    root = apply(shadow(old), copy.deepcopy(ops))
    assert strict_equal(unshadow(root), expected)


# ── the diff, case by case ──────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("old", "new", "ops"),
    [
        (True, 1, [{"op": "replace", "path": "", "value": 1}]),
        (0, False, [{"op": "replace", "path": "", "value": False}]),
        (1.0, True, [{"op": "replace", "path": "", "value": True}]),
        (False, -0.0, [{"op": "replace", "path": "", "value": -0.0}]),
        (1, 1.0, []),  # documented: the same JSON number
        (
            {"a": {"b": [True, 0, {"c": 1}]}},
            {"a": {"b": [1, False, {"c": True}]}},
            [
                {"op": "replace", "path": "/a/b/0", "value": 1},
                {"op": "replace", "path": "/a/b/1", "value": False},
                {"op": "replace", "path": "/a/b/2/c", "value": True},
            ],
        ),
        (
            {"a/b": 1, "~x": 2, "~1": 3},
            {"a/b": 2, "~x": 3, "~1": 4},
            [
                {"op": "replace", "path": "/a~1b", "value": 2},
                {"op": "replace", "path": "/~0x", "value": 3},
                {"op": "replace", "path": "/~01", "value": 4},
            ],
        ),
        (
            {"a": 1},
            {"b": 1},
            [{"op": "remove", "path": "/a"}, {"op": "add", "path": "/b", "value": 1}],
        ),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, []),  # member order is not part of JSON
        ({"a": [1]}, {"a": {"0": 1}}, [{"op": "replace", "path": "/a", "value": {"0": 1}}]),
        (
            [1, 2],
            [1, 2, 3, 4],
            [
                {"op": "add", "path": "/2", "value": 3},
                {"op": "add", "path": "/3", "value": 4},
            ],
        ),
        (
            [1, 2, 3, 4],
            [1, 2],
            [
                {"op": "remove", "path": "/3"},
                {"op": "remove", "path": "/2"},
            ],
        ),
        (["a", "b", "c"], ["b", "c"], [{"op": "remove", "path": "/0"}]),
        (["a", "b", "c"], ["z", "a", "b", "c"], [{"op": "add", "path": "/0", "value": "z"}]),
        (["a", "b", "c"], ["a", "c"], [{"op": "remove", "path": "/1"}]),
        (["a", "b", "c"], ["a", "x", "c"], [{"op": "replace", "path": "/1", "value": "x"}]),
        ([], {}, [{"op": "replace", "path": "", "value": {}}]),
        (None, "x", [{"op": "replace", "path": "", "value": "x"}]),
    ],
)
def test_diff_cases(old: Any, new: Any, ops: list[dict[str, Any]]) -> None:
    assert diff(old, new) == ops
    check_patch(old, new, ops)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (True, 1),
        (1, True),
        (False, 0),
        (0, False),
        (True, 1.0),
        (1.0, True),
        (False, 0.0),
        (0.0, False),
        (False, -0.0),
        (-0.0, False),
    ],
)
def test_a_lone_bool_number_swap_deep_inside_is_found(before: Any, after: Any) -> None:
    # The only difference sits where C-level `==` compares leaves inside containers.
    old = {"a": [{"b": before, "c": "same"}], "d": [before]}
    new = {"a": [{"b": after, "c": "same"}], "d": [before]}
    assert diff(old, new) == [{"op": "replace", "path": "/a/0/b", "value": after}]
    assert diff([old], [new]) == [{"op": "replace", "path": "/0/a/0/b", "value": after}]


def test_tuples_diff_like_lists() -> None:
    assert diff([1, 2], (1, 2)) == []
    assert diff([1, 2], (1, 3)) == [{"op": "replace", "path": "/1", "value": 3}]


def test_non_string_keys_are_refused() -> None:
    with pytest.raises(TypeError, match="keys must be strings"):
        diff({"a": 1}, {1: 1})


def test_operation_values_are_the_new_documents_objects() -> None:
    # Documented: no copy is made, the caller encodes before changing `new`.
    new = {"a": {"b": [1]}}
    (op,) = diff({}, new)
    assert op["value"] is new["a"]


class Spy:
    """Counts Python-level reads of spy containers, which C-level `==` never makes."""

    reads = 0


class SpyList(list[Any]):
    def __getitem__(self, index: Any) -> Any:
        Spy.reads += 1
        return super().__getitem__(index)

    def __iter__(self) -> Any:
        Spy.reads += 1
        return super().__iter__()

    def __len__(self) -> int:
        Spy.reads += 1
        return super().__len__()


class SpyDict(dict[str, Any]):
    def __getitem__(self, key: str) -> Any:
        Spy.reads += 1
        return super().__getitem__(key)

    def __iter__(self) -> Any:
        Spy.reads += 1
        return super().__iter__()

    def items(self) -> Any:
        Spy.reads += 1
        return super().items()

    def values(self) -> Any:
        Spy.reads += 1
        return super().values()

    def keys(self) -> Any:
        Spy.reads += 1
        return super().keys()


def test_unchanged_subtrees_are_not_walked_in_python() -> None:
    items = [{"id": i, "done": i % 2 == 0, "n": i % 3, "tags": ["a"]} for i in range(1000)]
    root = shadow({"big": items, "nested": {"deep": items}, "small": items[:3], "leaf": 1})
    new = {
        "big": [SpyDict(item, tags=SpyList(["a"])) for item in items],
        "nested": {"deep": [SpyDict(item) for item in items]},
        "small": [SpyDict(item) for item in items[:3]],
        "leaf": 2,
    }
    Spy.reads = 0
    ops, _ = diff_shadow(root, new)
    assert ops == [{"op": "replace", "path": "/leaf", "value": 2}]
    assert Spy.reads == 0  # 2,003 unchanged items, all compared in C


def test_a_changed_subtree_is_entered_only_along_the_change() -> None:
    items = [SpyDict(id=i, tags=SpyList(["x"])) for i in range(100)]
    old = {"items": [{"id": i, "tags": ["x"]} for i in range(100)]}
    root = shadow(old)
    items[42] = SpyDict(id=42, tags=SpyList(["x", "y"]))
    Spy.reads = 0
    ops, _ = diff_shadow(root, {"items": items})
    assert ops == [{"op": "add", "path": "/items/42/tags/1", "value": "y"}]
    # Only item 42 and its tags were read in Python; the other 99 were compared in C.
    assert 0 < Spy.reads <= 10


# ── shadows ─────────────────────────────────────────────────────────────────────


def test_shadow_markers_never_equal_the_other_kind() -> None:
    t, f, one, zero, one_f = shadow([True, False, 1, 0, 1.0])
    assert (t == 1) is False and (t == 1.0) is False and (f == 0) is False
    assert (one == True) is False and (zero == False) is False  # noqa: E712
    assert (t == True) is True and (f == False) is True and (one == 1) is True  # noqa: E712
    assert t == True and t != 1 and t != 1.0 and t != f  # noqa: E712
    assert f == False and f != 0 and f != 0.0 and f != -0.0  # noqa: E712
    assert one == 1 and one == 1.0 and one != True and one == one_f  # noqa: E712
    assert zero == 0 and zero == -0.0 and zero != False  # noqa: E712
    assert [t, one] == [True, 1] and [t, one] != [1, True]
    assert copy.deepcopy(t) is t


def test_shadow_shares_nothing_mutable() -> None:
    doc = {"a": [{"b": [1]}], "s": "text"}
    root = shadow(doc)
    doc["a"][0]["b"].append(2)
    doc["a"].append(3)
    assert unshadow(root) == {"a": [{"b": [1]}], "s": "text"}


def test_shadow_takes_other_types_in_their_json_form() -> None:
    root = shadow({"t": (1, True), "n": None})
    assert unshadow(root) == {"t": [1, True], "n": None}


def test_apply_edits_copies_inserted_values() -> None:
    root = shadow({"a": 1})
    new = {"a": 1, "b": {"c": [1]}}
    _, edits = diff_shadow(root, new)
    root = apply_edits(root, edits)
    new["b"]["c"].append(2)
    assert unshadow(root) == {"a": 1, "b": {"c": [1]}}


# ── applying user operations to a shadow ────────────────────────────────────────


def test_apply_supports_all_six_operations() -> None:
    root = shadow({"a": [1, 2], "b": {"c": True}, "d": 0})
    ops = [
        {"op": "test", "path": "/b/c", "value": True},
        {"op": "test", "path": "/d", "value": 0},
        {"op": "move", "from": "/a/0", "path": "/a/-"},
        {"op": "copy", "from": "/b", "path": "/e"},
        {"op": "replace", "path": "/b/c", "value": False},
        {"op": "add", "path": "/f", "value": [True]},
        {"op": "remove", "path": "/d"},
    ]
    root = apply(root, ops)
    assert unshadow(root) == {"a": [2, 1], "b": {"c": False}, "e": {"c": True}, "f": [True]}
    assert diff_shadow(root, {"a": [2, 1], "b": {"c": False}, "e": {"c": True}, "f": [True]}) == (
        [],
        [],
    )


def test_apply_copies_inserted_values() -> None:
    value = {"x": [1]}
    root = apply(shadow({}), [{"op": "add", "path": "/v", "value": value}])
    value["x"].append(2)
    assert unshadow(root) == {"v": {"x": [1]}}


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/flag", "value": 1}],  # true is not 1
        [{"op": "test", "path": "/n", "value": False}],  # 0 is not false
        [{"op": "remove", "path": "/missing"}],
        [{"op": "add", "path": "/a/9", "value": 1}],
        [{"op": "add", "path": "no-slash", "value": 1}],
        [{"op": "add", "path": "/flag/x", "value": 1}],
        [{"op": "frobnicate", "path": "/a"}],
        [{"op": "add", "path": "/x"}],
        [{"op": "add", "path": "/x", "value": 1}, {"op": "remove", "path": "/nope"}],
        ["not an operation"],
    ],
)
def test_apply_rejects_bad_operations_and_changes_nothing(ops: list[Any]) -> None:
    root = shadow({"a": [1], "flag": True, "n": 0})
    before = dumps_shadow(root)
    with pytest.raises(StatePatchError, match="does not apply") as info:
        apply(root, ops)
    assert isinstance(info.value, UsageError)
    assert dumps_shadow(root) == before


# ── the byte-guided diff ────────────────────────────────────────────────────────


def check_index(index: Index | None, doc: Any) -> None:
    """Every length an index holds is the member's true encoded length (plus one)."""
    if index is None:
        return
    if isinstance(doc, dict):
        assert index.names == list(doc)
        members = list(doc.items())
        assert index.lengths == [
            len(orjson.dumps(k)) + len(orjson.dumps(v)) + 2 for k, v in members
        ]
        values = [v for _, v in members]
    else:
        assert index.names is None
        assert index.lengths == [len(orjson.dumps(v)) + 1 for v in doc]
        values = list(doc)
    assert len(index.children) == len(values)
    for child, value in zip(index.children, values, strict=True):
        check_index(child, value)


class Guided:
    """Publishes a sequence of documents through `diff_encoded`, keeping the index."""

    def __init__(self, doc: Any) -> None:
        self.root = shadow(doc)
        self.encoded = orjson.dumps(doc)
        self.index: Index | None = None
        self.doc = copy.deepcopy(doc)

    def step(self, new: Any) -> list[dict[str, Any]]:
        after = orjson.dumps(new)
        if after == self.encoded:
            assert diff(self.doc, new) == []
            return []
        found = diff_encoded(self.root, new, self.encoded, after, self.index)
        if found is None:
            assert not (isinstance(new, (dict, list)) and type(self.root) is type(new))
            ops, edits = diff_shadow(self.root, new)
            self.index = None
        else:
            ops, edits, self.index = found
            assert self.index is not None  # kept true, never given up
        check_patch(self.doc, new, ops)
        self.root = apply_edits(self.root, edits)
        self.encoded = after
        self.doc = copy.deepcopy(new)
        check_index(self.index, new)
        assert diff_shadow(self.root, new) == ([], [])
        return ops


@st.composite
def guided_histories(draw: st.DrawFn) -> list[Any]:
    docs = [draw(JSON)]
    for _ in range(draw(st.integers(1, 10))):
        docs.append(draw(edited(docs[-1])) if draw(st.integers(0, 5)) else draw(JSON))
    return docs


@SETTINGS
@given(guided_histories())
def test_the_byte_guided_diff_is_exact_and_keeps_its_index_true(docs: list[Any]) -> None:
    guided = Guided(docs[0])
    for doc in docs[1:]:
        guided.step(doc)


@pytest.mark.parametrize(
    ("old", "new", "ops"),
    [
        ({"a": 1, "b": 2}, {"a": 0, "b": 2}, [{"op": "replace", "path": "/a", "value": 0}]),
        ({"a": 1, "b": 2}, {"a": 1, "b": 3}, [{"op": "replace", "path": "/b", "value": 3}]),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, []),
        ({"a": [1, 2]}, {"a": [1.0, 2]}, []),
        ({"a": [True]}, {"a": [1]}, [{"op": "replace", "path": "/a/0", "value": 1}]),
        ({"a": [0]}, {"a": [False]}, [{"op": "replace", "path": "/a/0", "value": False}]),
        (
            {"s": 'x"],"t":{"u', "t": 1},
            {"s": 'x"],"t":{"v', "t": 1},
            [{"op": "replace", "path": "/s", "value": 'x"],"t":{"v'}],
        ),
        (
            {"s": "\\", "t": ["\\"]},
            {"s": "\\", "t": ['\\"']},
            [{"op": "replace", "path": "/t/0", "value": '\\"'}],
        ),
        ({"é": "ü✓"}, {"é": "ü✗"}, [{"op": "replace", "path": "/é", "value": "ü✗"}]),
        (
            {"a": {"b": 1}},
            {"a": {"c": 1}},
            [
                {"op": "remove", "path": "/a/b"},
                {"op": "add", "path": "/a/c", "value": 1},
            ],
        ),
        ({"a": {"b": 1}}, {"a": [1]}, [{"op": "replace", "path": "/a", "value": [1]}]),
        ([[1], [2]], [[1], [2, 3]], [{"op": "add", "path": "/1/1", "value": 3}]),
        ([1, 2, 3], [2, 3], [{"op": "remove", "path": "/0"}]),
        ([1, 2, 3], [1, 2, 3, 4], [{"op": "add", "path": "/3", "value": 4}]),
    ],
)
def test_byte_guided_cases(old: Any, new: Any, ops: list[dict[str, Any]]) -> None:
    guided = Guided(old)
    assert guided.step(new) == ops
    assert guided.step(old) == diff(new, old)  # and back, with the index kept


def test_a_change_in_a_huge_list_is_found_by_its_bytes() -> None:
    items = [{"id": i, "done": i % 2 == 0, "tags": ["a", "b"]} for i in range(5000)]
    doc = {"head": "h", "items": items, "end": [True, 0]}
    guided = Guided(doc)
    for index, value in [(2500, False), (2500, 0), (0, 1), (4999, True), (17, 1.0)]:
        new = copy.deepcopy(guided.doc)
        new["items"][index]["done"] = value
        assert guided.step(new) == [
            {"op": "replace", "path": f"/items/{index}/done", "value": value}
        ]
    # Several distant changes at once.
    new = copy.deepcopy(guided.doc)
    new["items"][1]["tags"].append("c")
    new["items"][4000]["id"] = "x"
    new["end"][1] = False
    assert guided.step(new) == [
        {"op": "add", "path": "/items/1/tags/2", "value": "c"},
        {"op": "replace", "path": "/items/4000/id", "value": "x"},
        {"op": "replace", "path": "/end/1", "value": False},
    ]


def test_unchanged_members_are_not_read_by_the_byte_guided_diff() -> None:
    items = [{"id": i, "tags": ["x"]} for i in range(1000)]
    old = {"items": items, "other": {"deep": items}}
    root = shadow(old)
    new = {
        "items": [SpyDict(item, tags=SpyList(["x"])) for item in items],
        "other": {"deep": [SpyDict(item) for item in items]},
    }
    new["items"][500] = {"id": 500, "tags": ["y"]}
    encoded = orjson.dumps(old)
    found = diff_encoded(root, new, encoded, orjson.dumps(new), None)
    assert found is not None
    ops, edits, index = found
    assert ops == [{"op": "replace", "path": "/items/500/tags/0", "value": "y"}]
    # With the index kept, the next change reads no spy at all: nothing is measured.
    root = apply_edits(root, edits)
    encoded = orjson.dumps(new)
    new["items"][500]["tags"][0] = "z"
    Spy.reads = 0
    found = diff_encoded(root, new, encoded, orjson.dumps(new), index)
    assert found is not None and found[0] == [
        {"op": "replace", "path": "/items/500/tags/0", "value": "z"}
    ]
    assert Spy.reads == 0
