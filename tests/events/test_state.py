"""The state publishing rule: snapshot first, nothing when unchanged, a delta only when it
is smaller, and deltas that rebuild the state exactly on the client."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from tiller.errors import StatePatchError, UsageError
from tiller.events import _state
from tiller.events._state import StateManager, StatePublish, apply_to_live

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True)


@pytest.fixture(autouse=True, scope="module", params=["byte-guided", "whole-document"])
def diff_mode(request: pytest.FixtureRequest) -> Any:
    """Every test runs twice: with every state diffed guided by its encoding, and with
    every state diffed against the whole shadow (the two ways `publish` chooses from)."""
    saved = _state.GUIDED_MIN_BYTES
    _state.GUIDED_MIN_BYTES = 0 if request.param == "byte-guided" else 1 << 62
    yield request.param
    _state.GUIDED_MIN_BYTES = saved


KEYS = st.one_of(
    st.sampled_from(["a", "b", "c", "", "/", "~", "a/b", "~0", "~1", "0", "-"]),
    st.text(max_size=4),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from([0.0, -0.0, 1.0, 2.5]),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.text(min_size=20, max_size=60),  # bulky leaves make deltas pay off
)
JSON = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(KEYS, inner, max_size=6),
    max_leaves=40,
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
    """A copy of `doc` with a few random changes (bool/number flips among them)."""
    action = draw(
        st.sampled_from(["descend", "descend", "same", "replace", "grow", "shrink", "flip"])
    )
    if action == "same":
        return copy.deepcopy(doc)
    if action == "flip":
        if doc is True or doc is False:
            return int(doc)
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
def histories(draw: st.DrawFn) -> list[Any]:
    """A sequence of states, each usually an edit of the one before."""
    docs = [draw(JSON)]
    for _ in range(draw(st.integers(1, 8))):
        docs.append(draw(edited(docs[-1])) if draw(st.integers(0, 4)) else draw(JSON))
    return docs


def morph(live: Any, target: Any) -> Any:
    """Change `live` in place, container by container, until it equals `target`; returns the
    root (a new one only if the root itself cannot become `target`). This is what an agent
    does to `state_mut()`: nested objects keep their identity while their content changes."""
    if isinstance(live, dict) and isinstance(target, dict):
        for key in [k for k in live if k not in target]:
            del live[key]
        for key, value in target.items():
            live[key] = morph(live[key], value) if key in live else copy.deepcopy(value)
        return live
    if isinstance(live, list) and isinstance(target, list):
        del live[len(target) :]
        for index, value in enumerate(target):
            if index < len(live):
                live[index] = morph(live[index], value)
            else:
                live.append(copy.deepcopy(value))
        return live
    return copy.deepcopy(target)


class Client:
    """What an AG-UI client does with the results: replace on snapshot, patch on delta."""

    def __init__(self) -> None:
        self.state: Any = None
        self.seen = False

    def receive(self, pub: StatePublish) -> None:
        assert pub.encoded == orjson.dumps(pub.snapshot if pub.kind == "snapshot" else pub.delta)
        if pub.kind == "snapshot":
            assert pub.delta is None
            self.state = copy.deepcopy(pub.snapshot)
        else:
            assert pub.snapshot is None and pub.delta
            assert self.seen, "a delta before any snapshot"
            self.state = jsonpatch.apply_patch(self.state, pub.delta)
        self.seen = True


def check_publish(manager: StateManager, client: Client, previous: Any, doc: Any) -> None:
    pub = manager.publish(doc)
    first = not client.seen
    if pub is None:
        assert not first
        assert strict_equal(previous, doc)
    else:
        assert first or not strict_equal(previous, doc), "a publish for an unchanged state"
        assert pub.kind == "snapshot" or not first
        if pub.kind == "delta":
            assert len(pub.encoded) < len(orjson.dumps(doc))
            assert all(op["op"] in ("add", "remove", "replace") for op in pub.delta or ())
        client.receive(pub)
    assert strict_equal(client.state, doc)
    assert strict_equal(manager.published, doc)


# ── properties ──────────────────────────────────────────────────────────────────


@SETTINGS
@given(histories())
def test_published_sequences_rebuild_every_state_exactly(docs: list[Any]) -> None:
    manager, client = StateManager(), Client()
    previous: Any = None
    for doc in docs:
        check_publish(manager, client, previous, doc)
        check_publish(manager, client, doc, doc)  # again, unchanged: nothing
        previous = doc


@SETTINGS
@given(histories())
def test_in_place_changes_of_the_live_state_are_seen(docs: list[Any]) -> None:
    manager, client = StateManager(), Client()
    live = copy.deepcopy(docs[0])
    check_publish(manager, client, None, live)
    previous = copy.deepcopy(live)
    for doc in docs[1:]:
        live = morph(live, doc)
        check_publish(manager, client, previous, live)
        previous = copy.deepcopy(live)


@SETTINGS
@given(histories(), st.data())
def test_patches_and_publishes_interleave(docs: list[Any], data: st.DataObject) -> None:
    manager, client = StateManager(), Client()
    check_publish(manager, client, None, docs[0])
    previous = docs[0]
    for doc in docs[1:]:
        if data.draw(st.booleans(), label="patch"):
            ops = jsonpatch.make_patch(previous, doc).patch  # uses move and copy too
            pub = manager.patch(copy.deepcopy(ops))
            if pub is not None:
                client.receive(pub)
            assert strict_equal(client.state, doc)
            assert strict_equal(manager.published, doc)
        else:
            check_publish(manager, client, previous, doc)
        previous = doc


# ── publish ─────────────────────────────────────────────────────────────────────


def test_first_publish_is_a_snapshot_then_unchanged_is_nothing() -> None:
    manager = StateManager()
    assert not manager.has_published
    assert manager.published_json is None
    state = {"todos": [{"title": "write tests", "done": False}]}
    pub = manager.publish(state)
    assert pub == StatePublish(
        "snapshot", state, None, b'{"todos":[{"title":"write tests","done":false}]}'
    )
    assert manager.publish(state) is None
    assert manager.publish(copy.deepcopy(state)) is None
    assert manager.has_published


def test_every_kind_of_json_root_can_be_published() -> None:
    manager = StateManager()
    for doc in [None, 1, "text", [1], {"a": None}, True]:
        pub = manager.publish(doc)
        assert pub is not None
        assert strict_equal(manager.published, doc)


def test_a_small_change_is_a_delta() -> None:
    manager = StateManager()
    state = {"title": "a long title that dwarfs the change", "count": 2, "done": False}
    manager.publish(state)
    state["count"] = 3
    assert manager.publish(state) == StatePublish(
        "delta",
        None,
        [{"op": "replace", "path": "/count", "value": 3}],
        b'[{"op":"replace","path":"/count","value":3}]',
    )


def test_a_delta_not_smaller_than_the_snapshot_becomes_a_snapshot() -> None:
    manager = StateManager()
    manager.publish({"a": 1})
    pub = manager.publish({"a": 2})  # the delta is longer than `{"a":2}`
    assert pub is not None and pub.kind == "snapshot" and pub.snapshot == {"a": 2}
    manager.publish({"xs": list(range(20))})
    pub = manager.publish({"xs": list(range(100, 120))})
    assert pub is not None and pub.kind == "snapshot"


def test_a_delta_as_long_as_the_snapshot_is_not_sent() -> None:
    # "Strictly smaller": at equal length the snapshot wins.
    delta = orjson.dumps([{"op": "replace", "path": "/k", "value": "new"}])
    state = {"k": "old", "p": ""}
    state["p"] = "x" * (len(delta) - len(orjson.dumps(state)))
    manager = StateManager()
    manager.publish(state)
    state = {**state, "k": "new"}
    assert len(orjson.dumps(state)) == len(delta)
    pub = manager.publish(state)
    assert pub is not None and pub.kind == "snapshot"
    state = {**state, "k": "one", "p": state["p"] + "x"}  # one byte more: the delta wins
    manager.publish({**state, "k": "new"})
    pub = manager.publish(state)
    assert pub is not None and pub.kind == "delta"


def test_bool_and_number_swaps_deep_inside_are_changes() -> None:
    manager, client = StateManager(), Client()
    state: dict[str, Any] = {
        "pad": "x" * 1000,
        "deep": {"list": [True, 0, {"flag": 1, "off": 0.0, "on": False}]},
    }
    client.receive(manager.publish(state) or pytest.fail("no snapshot"))
    state["deep"]["list"][0] = 1
    state["deep"]["list"][1] = False
    state["deep"]["list"][2]["flag"] = True
    state["deep"]["list"][2]["off"] = False
    state["deep"]["list"][2]["on"] = 0
    pub = manager.publish(state)
    assert pub is not None and pub.kind == "delta"
    assert pub.delta == [
        {"op": "replace", "path": "/deep/list/0", "value": 1},
        {"op": "replace", "path": "/deep/list/1", "value": False},
        {"op": "replace", "path": "/deep/list/2/flag", "value": True},
        {"op": "replace", "path": "/deep/list/2/off", "value": False},
        {"op": "replace", "path": "/deep/list/2/on", "value": 0},
    ]
    client.receive(pub)
    assert strict_equal(client.state, state)
    # and back again
    state["deep"]["list"][0] = True
    pub = manager.publish(state)
    assert pub is not None and pub.delta == [
        {"op": "replace", "path": "/deep/list/0", "value": True}
    ]


def test_key_order_alone_is_no_change() -> None:
    manager = StateManager()
    manager.publish({"a": 1, "b": {"c": 2, "d": 3}})
    assert manager.publish({"b": {"d": 3, "c": 2}, "a": 1}) is None
    assert manager.publish({"b": {"d": 3, "c": 2}, "a": 1}) is None


def test_an_int_and_an_equal_float_are_the_same_number() -> None:
    # Documented: JSON has one number type; `1` and `1.0` are the same value.
    manager = StateManager()
    manager.publish({"n": 1, "pad": "x" * 50})
    assert manager.publish({"n": 1.0, "pad": "x" * 50}) is None
    pub = manager.publish({"n": 1.5, "pad": "x" * 50})
    assert pub is not None and pub.delta == [{"op": "replace", "path": "/n", "value": 1.5}]


def test_removing_the_first_item_is_one_operation() -> None:
    manager = StateManager()
    items = [f"item {i} with some text" for i in range(10)]
    manager.publish({"items": items})
    pub = manager.publish({"items": items[1:]})
    assert pub is not None and pub.delta == [{"op": "remove", "path": "/items/0"}]


def test_results_share_nothing_with_the_live_state_or_the_manager() -> None:
    manager = StateManager()
    state: dict[str, Any] = {"list": [1, 2], "pad": "x" * 100}
    snap = manager.publish(state)
    assert snap is not None
    state["list"].append({"new": [True]})
    delta = manager.publish(state)
    assert delta is not None and delta.kind == "delta"
    # The caller keeps mutating: nothing handed out changes.
    state["list"][2]["new"].append(False)
    assert snap.snapshot == {"list": [1, 2], "pad": "x" * 100}
    assert delta.delta == [{"op": "add", "path": "/list/2", "value": {"new": [True]}}]
    # The receiver mutates what it got: the manager is unaffected.
    assert snap.snapshot is not None and delta.delta is not None
    snap.snapshot["list"].clear()
    delta.delta[0]["value"]["new"].clear()
    published = manager.published
    assert published == {"list": [1, 2, {"new": [True]}], "pad": "x" * 100}
    published["list"].clear()
    assert manager.published == {"list": [1, 2, {"new": [True]}], "pad": "x" * 100}
    pub = manager.publish(state)
    assert pub is not None and pub.delta == [{"op": "add", "path": "/list/2/new/1", "value": False}]


def test_reset_makes_the_next_publish_a_snapshot() -> None:
    manager = StateManager()
    state = {"a": "x" * 100, "n": 1}
    manager.publish(state)
    manager.reset()
    pub = manager.publish(state)  # unchanged, still a snapshot after reset
    assert pub is not None and pub.kind == "snapshot"
    assert manager.publish(state) is None
    manager.reset()
    state["n"] = 2  # changed, small: still a snapshot after reset
    pub = manager.publish(state)
    assert pub is not None and pub.kind == "snapshot" and pub.snapshot == state
    state["n"] = 3
    pub = manager.publish(state)
    assert pub is not None and pub.kind == "delta"


def test_a_state_that_is_not_json_is_a_usage_error() -> None:
    manager = StateManager()
    with pytest.raises(UsageError, match="cannot be encoded as JSON"):
        manager.publish({1: "int key"})
    with pytest.raises(UsageError, match="cannot be encoded as JSON"):
        manager.publish({"x": object()})
    assert not manager.has_published
    with pytest.raises(UsageError, match="no state was published"):
        manager.published  # noqa: B018


# ── pydantic states ─────────────────────────────────────────────────────────────


class Todo(BaseModel):
    title: str
    done: bool = False


class Board(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    todos: list[Todo] = Field(default_factory=list)
    owner_name: str = Field(default="nobody", alias="ownerName")
    score: int = 0


def test_a_pydantic_state_is_published_by_alias() -> None:
    manager, client = StateManager(), Client()
    board = Board(todos=[Todo(title="write the long docs for the state manager")])
    pub = manager.publish(board)
    assert pub is not None and pub.snapshot == {
        "todos": [{"title": "write the long docs for the state manager", "done": False}],
        "ownerName": "nobody",
        "score": 0,
    }
    client.receive(pub)
    board.todos[0].done = True
    board.score = 1
    pub = manager.publish(board)
    assert pub is not None and pub.delta == [
        {"op": "replace", "path": "/todos/0/done", "value": True},
        {"op": "replace", "path": "/score", "value": 1},
    ]
    client.receive(pub)
    assert client.state == board.model_dump(mode="json", by_alias=True)
    assert manager.publish(board) is None


def test_apply_to_live_validates_a_pydantic_state_into_a_new_instance() -> None:
    board = Board(todos=[Todo(title="a")])
    patched = apply_to_live(board, [{"op": "add", "path": "/todos/-", "value": {"title": "b"}}])
    assert isinstance(patched, Board) and patched is not board
    assert [t.title for t in patched.todos] == ["a", "b"]
    assert [t.title for t in board.todos] == ["a"]
    patched = apply_to_live(board, [{"op": "replace", "path": "/ownerName", "value": "ann"}])
    assert patched.owner_name == "ann"


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "replace", "path": "/score", "value": "high"}],  # does not fit the model
        [{"op": "remove", "path": "/todos/0/title"}],  # a required field
        [{"op": "remove", "path": "/nothing"}],  # does not apply
    ],
)
def test_apply_to_live_refuses_a_bad_pydantic_patch(ops: list[dict[str, Any]]) -> None:
    board = Board(todos=[Todo(title="a")])
    before = board.model_dump()
    with pytest.raises(StatePatchError):
        apply_to_live(board, ops)
    assert board.model_dump() == before


# ── patch and apply_to_live ─────────────────────────────────────────────────────


def test_patch_publishes_the_operations_as_a_delta() -> None:
    manager, client = StateManager(), Client()
    live: dict[str, Any] = {"todos": [{"title": "a", "done": False}], "n": 0}
    client.receive(manager.publish(live) or pytest.fail("no snapshot"))
    ops = [
        {"op": "replace", "path": "/todos/0/done", "value": True},
        {"op": "add", "path": "/todos/-", "value": {"title": "b", "done": False}},
        {"op": "test", "path": "/n", "value": 0},
        {"op": "move", "from": "/n", "path": "/count"},
    ]
    live = apply_to_live(live, ops)
    pub = manager.patch(ops)
    assert pub == StatePublish("delta", None, ops, orjson.dumps(ops))
    assert pub is not None and pub.delta is not ops
    client.receive(pub)
    assert client.state == live == manager.published
    assert manager.published_json == orjson.dumps(live)
    assert manager.publish(live) is None  # the manager already knows the change


def test_patch_copies_the_operations() -> None:
    manager = StateManager()
    manager.publish({"a": None})
    value = {"x": [1]}
    ops = [{"op": "replace", "path": "/a", "value": value}]
    pub = manager.patch(ops)
    value["x"].append(2)
    ops.clear()
    assert pub is not None and pub.delta == [{"op": "replace", "path": "/a", "value": {"x": [1]}}]
    assert manager.published == {"a": {"x": [1]}}


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/a", "value": 2}, {"op": "test", "path": "/b", "value": 1}],
        [{"op": "add", "path": "/a/b", "value": 1}],
        [{"op": "teleport", "path": "/a"}],
        [{"op": "add", "path": "/x", "value": object()}],
        [{"op": "add", "path": "x", "value": 1}],
        "not a list of operations",
        [["op", "add"]],
        42,
    ],
)
def test_patch_refuses_bad_operations_and_changes_nothing(ops: Any) -> None:
    manager = StateManager()
    manager.publish({"a": 1, "b": True})
    with pytest.raises(StatePatchError):
        manager.patch(ops)
    assert strict_equal(manager.published, {"a": 1, "b": True})
    assert manager.publish({"a": 1, "b": True}) is None


def test_patch_before_any_publish_needs_the_current_state() -> None:
    manager = StateManager()
    with pytest.raises(UsageError, match="publish the state first"):
        manager.patch([{"op": "add", "path": "/a", "value": 1}])
    pub = manager.patch([{"op": "add", "path": "/a", "value": 1}], current={"a": 1})
    assert pub is not None and pub.kind == "snapshot" and pub.snapshot == {"a": 1}


def test_patch_falls_back_to_a_diff_when_the_live_state_moved_on() -> None:
    manager, client = StateManager(), Client()
    live: dict[str, Any] = {"a": "x" * 50}
    client.receive(manager.publish(live) or pytest.fail("no snapshot"))
    live["b"] = []  # changed in place, never published
    ops = [{"op": "add", "path": "/b/-", "value": 1}]
    live = apply_to_live(live, ops)
    with pytest.raises(StatePatchError):
        manager.patch(ops)  # the client has no /b
    pub = manager.patch(ops, current=live)
    assert pub is not None
    client.receive(pub)
    assert client.state == live == {"a": "x" * 50, "b": [1]}


def test_empty_patch_publishes_nothing_unless_a_snapshot_is_due() -> None:
    manager = StateManager()
    manager.publish({"a": 1})
    assert manager.patch([]) is None
    manager.reset()
    pub = manager.patch([{"op": "replace", "path": "/a", "value": 2}])
    assert pub is not None and pub.kind == "snapshot" and pub.snapshot == {"a": 2}
    manager.reset()
    pub = manager.patch([])
    assert pub is not None and pub.kind == "snapshot" and pub.snapshot == {"a": 2}


def test_apply_to_live_changes_a_dict_in_place_and_atomically() -> None:
    live: dict[str, Any] = {"a": [1], "b": {"c": True}}
    inner = live["a"]
    value = {"deep": [1]}
    result = apply_to_live(live, [{"op": "add", "path": "/a/-", "value": value}])
    assert result is live and live["a"] is inner and inner == [1, {"deep": [1]}]
    value["deep"].append(2)
    assert inner[1] == {"deep": [1]}  # inserted values are copies
    with pytest.raises(StatePatchError, match="does not apply"):
        apply_to_live(
            live,
            [{"op": "remove", "path": "/a/0"}, {"op": "remove", "path": "/nope"}],
        )
    assert live == {"a": [1, {"deep": [1]}], "b": {"c": True}}


def test_apply_to_live_can_replace_the_root() -> None:
    assert apply_to_live({"a": 1}, [{"op": "replace", "path": "", "value": [1]}]) == [1]
    assert apply_to_live(3, [{"op": "replace", "path": "", "value": 4}]) == 4


# ── big states: the byte-guided diff ────────────────────────────────────────────


def big_state() -> dict[str, Any]:
    return {
        "title": "board",
        "todos": [
            {"id": i, "title": f"task {i}", "done": i % 2 == 0, "meta": {"n": i % 3}}
            for i in range(2000)
        ],
        "tail": {"flag": True, "zero": 0},
    }


def test_a_leaf_deep_in_a_big_state_is_one_operation_each_time() -> None:
    manager, client = StateManager(), Client()
    state = big_state()
    client.receive(manager.publish(state) or pytest.fail("no snapshot"))
    for tick, index in enumerate([1000, 1000, 3, 1999, 0, 1000]):
        state["todos"][index]["meta"]["n"] = 10 + tick
        pub = manager.publish(state)
        assert pub is not None and pub.delta == [
            {"op": "replace", "path": f"/todos/{index}/meta/n", "value": 10 + tick}
        ]
        client.receive(pub)
        assert manager.publish(state) is None
    assert strict_equal(client.state, state)


def test_big_state_edits_of_every_kind_rebuild_it_exactly() -> None:
    manager, client = StateManager(), Client()
    state = big_state()
    client.receive(manager.publish(state) or pytest.fail("no snapshot"))
    todos = state["todos"]

    def edits() -> list[Any]:
        return [
            lambda: state.update(title="a new title"),  # the very start
            lambda: state["tail"].update(zero=False),  # the very end, 0 becomes false
            lambda: state["tail"].update(flag=1),  # true becomes 1
            lambda: state["tail"].update(flag=1.0),  # the same number: nothing
            lambda: todos.insert(0, {"id": -1}),
            lambda: todos.pop(500),
            lambda: todos.append({"id": 2000, "title": '"],"x":{"y":[1,"\\'}),
            lambda: todos[7].update(title='ünïcödé ✓ \u2028 \x00 \\"'),
            lambda: (todos[3]["meta"].update(n=99), todos[1900]["meta"].update(n=98)),
            lambda: state.update(todos=todos[::-1]),
            lambda: todos[10].update(meta={"n": 1, "m": [True, 0]}),
            lambda: todos.__setitem__(11, [1, 2]),  # an object becomes an array
            lambda: state.__setitem__("tail", dict(reversed(state["tail"].items()))),
            lambda: state.__setitem__("new", {"k": "v"}),
            lambda: state.pop("title"),
            lambda: todos[20].pop("meta"),
            lambda: todos[21].update({"meta": todos[21].pop("meta")}),  # moved last
        ]

    for edit in edits():
        before = copy.deepcopy(state)
        edit()
        todos = state["todos"]
        pub = manager.publish(state)
        if pub is None:
            assert strict_equal(before, state)
        else:
            client.receive(pub)
        assert strict_equal(client.state, state)
        assert manager.publish(state) is None
    assert strict_equal(manager.published, state)


def test_a_big_state_after_a_patch_is_still_diffed_exactly() -> None:
    manager, client = StateManager(), Client()
    state = big_state()
    client.receive(manager.publish(state) or pytest.fail("no snapshot"))
    ops = [{"op": "replace", "path": "/todos/5/done", "value": 1}]
    state = apply_to_live(state, ops)
    client.receive(manager.patch(ops) or pytest.fail("no delta"))
    state["todos"][6]["done"] = 0
    pub = manager.publish(state)
    assert pub is not None and pub.delta == [{"op": "replace", "path": "/todos/6/done", "value": 0}]
    client.receive(pub)
    assert strict_equal(client.state, state)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(histories())
def test_states_inside_a_big_one_rebuild_exactly(docs: list[Any]) -> None:
    # The random states sit between big unchanged neighbours, so each change is located
    # by its bytes inside a big encoding.
    manager, client = StateManager(), Client()
    pad = ["x" * 40] * 100
    previous: Any = None
    for doc in docs:
        state = {"before": pad, "doc": [pad, doc, pad], "after": {"p": pad}}
        check_publish(manager, client, previous, state)
        previous = state
