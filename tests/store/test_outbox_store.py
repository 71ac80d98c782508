"""`OutboxStore`: staged calls and their release, on every backend (memory, a SQLite file,
the NATS server), with a fake clock so every timestamp is exact.

What matters: staging is idempotent, only a staged item can be edited, claimed for sending
or rejected, an item is claimed for sending once (also when two senders race), the result
or failure is recorded only for an item being sent, and a record this tiller did not write
is refused naming its key.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tiller.conversation import Taint, ToolCall
from tiller.errors import UsageError
from tiller.store import (
    OUTBOX_BUCKET,
    Bus,
    MalformedOutboxItem,
    NotFound,
    OutboxItem,
    OutboxResult,
    OutboxStatusError,
    OutboxStore,
    UnknownOutboxItem,
)

from .conftest import FakeClock


async def stage(
    store: OutboxStore, run_id: str = "run-1", call_id: str = "call-1", **arguments: object
) -> OutboxItem:
    drafted = arguments or {"to": "ana@example.org", "body": "hi"}
    return await store.stage(
        ToolCall(id=call_id, name="send_mail", arguments=orjson.dumps(drafted).decode()),
        run_id=run_id,
        thread_id=f"thread-{run_id}",
        taint=Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT,
        workspace="/work/ws",
    )


async def test_a_staged_call_is_recorded_whole(bus: Bus, clock: FakeClock) -> None:
    store = OutboxStore(bus)
    item = await stage(store, to="ana", body="hi")
    assert item.id.startswith("ob-") and len(item.id) == len("ob-") + 8
    assert item == OutboxItem(
        id=item.id,
        run_id="run-1",
        thread_id="thread-run-1",
        call_id="call-1",
        tool="send_mail",
        drafted_arguments={"to": "ana", "body": "hi"},
        status="staged",
        taint=Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT,
        workspace="/work/ws",
        created_at=clock.now,
        updated_at=clock.now,
    )
    assert item.arguments == {"to": "ana", "body": "hi"}
    assert await store.get(item.id) == item
    stored = await (await bus.kv(OUTBOX_BUCKET)).get(item.id)
    assert stored is not None
    record = orjson.loads(stored.value)
    assert record["taint"] == ["private_data", "untrusted_input"]
    assert record["edited_arguments"] is None and record["result"] is None


async def test_staging_a_call_twice_keeps_one_item(bus: Bus, clock: FakeClock) -> None:
    store = OutboxStore(bus)
    first = await stage(store)
    clock.advance(5)
    assert await stage(store) == first
    other = await stage(store, run_id="run-2")  # the same call id in another run
    assert other.id != first.id
    assert await store.list() == [first, other]


async def test_another_call_under_a_staged_calls_id_gets_its_own_item(bus: Bus) -> None:
    """A call under a staged call's id with other arguments is another call (law 10, as
    for held approvals): it gets its own draft, not the first one's (which a send would
    deliver in its place)."""
    store = OutboxStore(bus)
    first = await stage(store, to="ana", body="hi")
    second = await stage(store, to="bob", body="other")
    assert second.id != first.id and second.drafted_arguments == {"to": "bob", "body": "other"}
    assert await stage(store, to="ana", body="hi") == first
    assert await stage(store, to="bob", body="other") == second


async def test_edit_then_send(bus: Bus, clock: FakeClock) -> None:
    store = OutboxStore(bus)
    item = await stage(store)
    clock.advance(10)
    edited = await store.edit(item.id, {"to": "ana@example.org", "body": "hello"})
    assert edited.edited_arguments == {"to": "ana@example.org", "body": "hello"}
    assert edited.drafted_arguments == item.drafted_arguments  # the draft is kept
    assert edited.arguments == edited.edited_arguments
    assert (edited.status, edited.updated_at, edited.created_at) == (
        "staged",
        clock.now,
        item.created_at,
    )
    clock.advance(10)
    sending = await store.start_sending(item.id)
    assert (sending.status, sending.updated_at) == ("sending", clock.now)
    sent = await store.mark_sent(item.id, "queued as 42", is_error=False)
    assert sent.status == "sent"
    assert sent.result == OutboxResult(content="queued as 42", is_error=False)
    assert await store.get(item.id) == sent


async def test_an_item_is_sent_at_most_once(bus: Bus) -> None:
    store = OutboxStore(bus)
    item = await stage(store)
    await store.start_sending(item.id)
    with pytest.raises(OutboxStatusError, match=r"being sent .* an item is sent at most once"):
        await store.start_sending(item.id)
    await store.mark_sent(item.id, "done", is_error=True)
    with pytest.raises(OutboxStatusError, match="is sent: an item is sent at most once") as again:
        await store.start_sending(item.id)
    assert again.value.item.result == OutboxResult(content="done", is_error=True)


async def test_two_senders_at_once_one_wins(bus: Bus) -> None:
    store = OutboxStore(bus)
    item = await stage(store)
    outcomes = await asyncio.gather(
        store.start_sending(item.id),
        OutboxStore(bus).start_sending(item.id),
        return_exceptions=True,
    )
    assert sorted(type(o).__name__ for o in outcomes) == ["OutboxItem", "OutboxStatusError"]


async def test_a_failed_send_is_recorded_and_final(bus: Bus) -> None:
    store = OutboxStore(bus)
    item = await stage(store)
    await store.start_sending(item.id)
    failed = await store.mark_failed(item.id, "tool send_mail failed: ConnectionError")
    assert (failed.status, failed.failure, failed.result) == (
        "failed",
        "tool send_mail failed: ConnectionError",
        None,
    )
    with pytest.raises(OutboxStatusError, match=r"failed \(tool send_mail failed"):
        await store.start_sending(item.id)


async def test_reject(bus: Bus) -> None:
    store = OutboxStore(bus)
    item = await stage(store)
    with pytest.raises(UsageError, match="say why"):
        await store.reject(item.id, "")
    rejected = await store.reject(item.id, "wrong person")
    assert (rejected.status, rejected.reject_reason) == ("rejected", "wrong person")
    with pytest.raises(OutboxStatusError, match=r"rejected \(wrong person\): an item is sent"):
        await store.start_sending(item.id)
    with pytest.raises(OutboxStatusError, match="only a staged item can be edited"):
        await store.edit(item.id, {"to": "bo"})
    with pytest.raises(OutboxStatusError, match="only a staged item can be rejected"):
        await store.reject(item.id, "again")


@pytest.mark.parametrize(
    ("status_after", "action", "message"),
    [
        ("staged", "mark_sent", "only an item being sent can be marked sent"),
        ("staged", "mark_failed", "only an item being sent can be marked failed"),
        ("sending", "edit", "only a staged item can be edited"),
        ("sending", "reject", "only a staged item can be rejected"),
        ("sent", "mark_sent", "only an item being sent can be marked sent"),
        ("sent", "mark_failed", "only an item being sent can be marked failed"),
    ],
)
async def test_wrong_transitions_are_refused(
    bus: Bus, status_after: str, action: str, message: str
) -> None:
    store = OutboxStore(bus)
    item = await stage(store)
    if status_after in ("sending", "sent"):
        await store.start_sending(item.id)
    if status_after == "sent":
        await store.mark_sent(item.id, "ok", is_error=False)
    before = await store.get(item.id)
    calls = {
        "mark_sent": lambda: store.mark_sent(item.id, "x", is_error=False),
        "mark_failed": lambda: store.mark_failed(item.id, "x"),
        "edit": lambda: store.edit(item.id, {"to": "x"}),
        "reject": lambda: store.reject(item.id, "x"),
    }
    with pytest.raises(OutboxStatusError, match=message) as refused:
        await calls[action]()
    assert refused.value.item == before
    assert await store.get(item.id) == before  # nothing changed


async def test_edited_arguments_must_be_a_json_object(bus: Bus) -> None:
    store = OutboxStore(bus)
    item = await stage(store)
    with pytest.raises(UsageError, match="must be a JSON object"):
        await store.edit(item.id, ["to"])  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="must be JSON"):
        await store.edit(item.id, {"to": {1, 2}})
    assert (await store.get(item.id)).edited_arguments is None


async def test_list_filters_by_status(bus: Bus, clock: FakeClock) -> None:
    store = OutboxStore(bus)
    first = await stage(store, call_id="c-1")
    clock.advance(1)
    second = await stage(store, call_id="c-2")
    rejected = await store.reject(first.id, "no")
    assert await store.list() == [rejected, second]
    assert await store.list("staged") == [second]
    assert await store.list("rejected") == [rejected]
    with pytest.raises(UsageError, match="staged, sending, sent, rejected, failed"):
        await store.list("lost")  # type: ignore[arg-type]


@pytest.mark.parametrize("item_id", ["ob-00000000", "ap-00000000", "nope", ""])
async def test_unknown_ids(bus: Bus, item_id: str) -> None:
    store = OutboxStore(bus)
    await stage(store)
    with pytest.raises(UnknownOutboxItem, match="tiller outbox list"):
        await store.get(item_id)
    with pytest.raises(NotFound):
        await store.start_sending(item_id)


async def test_a_call_whose_arguments_are_not_an_object_is_not_staged(bus: Bus) -> None:
    store = OutboxStore(bus)
    with pytest.raises(UsageError, match="not a JSON object"):
        await store.stage(ToolCall(id="c", name="x", arguments='"text"'), run_id="r", thread_id="t")
    assert await store.list() == []


# ── records this tiller did not write ────────────────────────────────────────────────


def _valid() -> dict[str, object]:
    return {
        "schema_version": 1,
        "id": "ob-bad",
        "run_id": "r",
        "thread_id": "t",
        "call_id": "c",
        "tool": "x",
        "drafted_arguments": {},
        "edited_arguments": None,
        "status": "staged",
        "taint": [],
        "workspace": None,
        "created_at": 1.0,
        "updated_at": 1.0,
        "result": None,
        "reject_reason": None,
        "failure": None,
    }


def _without(field: str) -> dict[str, object]:
    return {key: value for key, value in _valid().items() if key != field}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b"\xff", "not JSON"),
        (b'"ob-bad"', "not a JSON object"),
        (orjson.dumps(_without("schema_version")), "schema version None"),
        (orjson.dumps({**_valid(), "status": "lost"}), "'status'"),
        (orjson.dumps({**_valid(), "result": {"content": 1}}), "'result.content'"),
        (orjson.dumps({**_valid(), "result": {"content": "x", "extra": 1}}), "'result.extra'"),
        (orjson.dumps({**_valid(), "edited_arguments": "x"}), "'edited_arguments'"),
        (orjson.dumps({**_valid(), "taint": ["private_data", 3]}), "list of flag names"),
        (orjson.dumps(_without("updated_at")), "'updated_at'"),
    ],
)
async def test_a_malformed_item_is_refused_naming_its_key(
    bus: Bus, value: bytes, problem: str
) -> None:
    await (await bus.kv(OUTBOX_BUCKET)).put("ob-bad", value)
    store = OutboxStore(bus)
    with pytest.raises(MalformedOutboxItem, match="tiller-outbox/ob-bad: ") as raised:
        await store.get("ob-bad")
    assert problem in str(raised.value)
    with pytest.raises(MalformedOutboxItem):
        await store.list()
    with pytest.raises(MalformedOutboxItem):
        await store.start_sending("ob-bad")


async def test_a_valid_hand_written_item_reads(bus: Bus) -> None:
    """The malformed cases above differ from this one in one field each."""
    await (await bus.kv(OUTBOX_BUCKET)).put("ob-bad", orjson.dumps(_valid()))
    assert (await OutboxStore(bus).get("ob-bad")).arguments == {}
