"""The runtime's own facts (the task checklist, ...) in the published state document:
beside the agent's typed state under `tiller`, never inside it, and stripped when a
client sends the document back."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from tiller.events import (
    RUNTIME_STATE_KEY,
    AgUiContext,
    StateDeltaEvent,
    StateSnapshotEvent,
    decode_state,
)


def new(state: Any = None, state_type: type[Any] | None = None) -> tuple[AgUiContext[Any], Any]:
    return AgUiContext.new(
        {"threadId": "t", "runId": "r", "messages": [], "state": state}, state_type=state_type
    )


class Notes(BaseModel):
    model_config = ConfigDict(extra="forbid")
    notes: list[str] = []


def test_the_runtime_section_rides_beside_the_typed_state() -> None:
    ctx, receiver = new(state_type=Notes)
    ctx.set_runtime_state("tasks", [{"id": "t1", "status": "pending"}])
    ctx.update_state(lambda s: s.notes.append("hello"))
    ctx.set_runtime_state("tasks", [{"id": "t1", "status": "completed"}])
    events = receiver.drain()
    assert events[0] == StateSnapshotEvent(
        {"notes": [], "tiller": {"tasks": [{"id": "t1", "status": "pending"}]}}
    )
    assert events[1] == StateDeltaEvent([{"op": "add", "path": "/notes/0", "value": "hello"}])
    assert events[2] == StateDeltaEvent(
        [{"op": "replace", "path": "/tiller/tasks/0/status", "value": "completed"}]
    )
    assert ctx.state == Notes(notes=["hello"])  # the agent's state never holds it
    assert ctx.runtime_state == {"tasks": [{"id": "t1", "status": "completed"}]}


def test_removing_the_last_fact_removes_the_section() -> None:
    ctx, receiver = new({"n": 1})
    ctx.set_runtime_state("tasks", [])
    ctx.set_runtime_state("tasks", None)
    ctx.set_runtime_state("tasks", None)  # nothing left to remove: nothing sent
    events = receiver.drain()
    assert events[0] == StateSnapshotEvent({"n": 1, "tiller": {"tasks": []}})
    assert len(events) == 2
    published = ctx._state_manager.published
    assert published == {"n": 1}


def test_a_state_that_is_not_an_object_has_no_room_for_it() -> None:
    ctx, receiver = new([1, 2], state_type=list)
    ctx.set_runtime_state("tasks", [{"id": "t1"}])
    assert receiver.drain() == [StateSnapshotEvent([1, 2])]
    assert ctx.runtime_state == {"tasks": [{"id": "t1"}]}


def test_patch_state_still_applies_with_the_section_published() -> None:
    ctx, receiver = new({"count": 0})
    ctx.set_runtime_state("tasks", [{"id": "t1"}])
    ctx.patch_state([{"op": "replace", "path": "/count", "value": 1}])
    events = receiver.drain()
    assert events[-1] == StateDeltaEvent([{"op": "replace", "path": "/count", "value": 1}])
    assert ctx._state_manager.published == {"count": 1, "tiller": {"tasks": [{"id": "t1"}]}}


@pytest.mark.parametrize("state_type", [None, Notes])
def test_a_client_echoing_the_document_back_gets_its_state_decoded(
    state_type: type[Any] | None,
) -> None:
    echoed = {"notes": ["a"], RUNTIME_STATE_KEY: {"tasks": [{"id": "t1"}]}}
    decoded = decode_state(echoed, state_type)
    assert decoded == ({"notes": ["a"]} if state_type is None else Notes(notes=["a"]))
    assert decode_state({RUNTIME_STATE_KEY: {}}, state_type) == (
        {} if state_type is None else Notes()
    )
