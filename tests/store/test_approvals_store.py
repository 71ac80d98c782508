"""`ApprovalStore`: held calls waiting for a person, on every backend (memory, a SQLite
file, the NATS server), with a fake clock so every timestamp is exact.

What matters: a call is held once (its id is stable), a decision is made once (a
compare-and-set: the second is refused, also when two race), a run finds its own records
and no one else's, and a record this tiller did not write is refused naming its key.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tiller.conversation import AssistantMessage, Taint, ToolCall, UserMessage
from tiller.errors import UsageError
from tiller.state import RunState
from tiller.store import (
    APPROVALS_BUCKET,
    AlreadyDecided,
    ApprovalStore,
    Bus,
    HeldApproval,
    MalformedApproval,
    NotFound,
    UnknownApproval,
)
from tiller.store._records import candidate_ids

from .conftest import FakeClock


def call(call_id: str = "call-1", **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name="write_file", arguments=orjson.dumps(arguments).decode())


async def hold(
    store: ApprovalStore, run_id: str = "run-1", call_id: str = "call-1", **arguments: object
) -> HeldApproval:
    return await store.hold(
        call(call_id, **(arguments or {"path": "a.txt"})),
        run_id=run_id,
        thread_id=f"thread-{run_id}",
        reason="file writes ask in this mode",
        risk="file_mutation",
        taint=Taint.PRIVATE_DATA,
        workspace="/work/ws",
    )


async def test_a_held_call_is_recorded_whole(bus: Bus, clock: FakeClock) -> None:
    store = ApprovalStore(bus)
    held = await hold(store, path="a.txt", content="hi")
    assert held.id.startswith("ap-") and len(held.id) == len("ap-") + 8
    assert held == HeldApproval(
        id=held.id,
        run_id="run-1",
        thread_id="thread-run-1",
        call_id="call-1",
        tool="write_file",
        arguments={"path": "a.txt", "content": "hi"},
        risk="file_mutation",
        reason="file writes ask in this mode",
        taint=Taint.PRIVATE_DATA,
        workspace="/work/ws",
        created_at=clock.now,
        status="pending",
    )
    assert await store.get(held.id) == held
    stored = await (await bus.kv(APPROVALS_BUCKET)).get(held.id)
    assert stored is not None
    record = orjson.loads(stored.value)
    assert record["schema_version"] == 1
    assert record["taint"] == ["private_data"]  # by name, readable in a store browser
    assert record["edited_arguments"] is None and record["decided_at"] is None


async def test_holding_a_call_twice_keeps_one_record(bus: Bus, clock: FakeClock) -> None:
    store = ApprovalStore(bus)
    first = await hold(store)
    clock.advance(30)
    again = await hold(store)
    assert again == first  # the same id, the first timestamp
    assert await store.list() == [first]
    decided = await store.decide(first.id, approve=True)
    assert await hold(store) == decided  # holding never undoes a decision


async def test_ids_are_per_run_and_call(bus: Bus, clock: FakeClock) -> None:
    store = ApprovalStore(bus)
    one = await hold(store, run_id="run-1", call_id="call-1")
    other_run = await hold(store, run_id="run-2", call_id="call-1")  # model call ids repeat
    clock.advance(1)
    other_call = await hold(store, run_id="run-1", call_id="call-2")
    assert len({one.id, other_run.id, other_call.id}) == 3
    assert [r.id for r in await store.for_run("run-1")] == [one.id, other_call.id]
    assert [r.id for r in await store.for_run("run-2")] == [other_run.id]
    assert await store.for_run("run") == []


async def test_a_run_whose_id_extends_another_stays_apart(bus: Bus) -> None:
    store = ApprovalStore(bus)
    short = await hold(store, run_id="r")
    long = await hold(store, run_id="r/x")
    assert await store.for_run("r") == [short]
    assert await store.for_run("r/x") == [long]


async def test_an_id_taken_by_another_call_gets_a_longer_one(bus: Bus, clock: FakeClock) -> None:
    store = ApprovalStore(bus)
    short, longer, *_ = candidate_ids("ap", "run-1", "call-1")
    squatter = HeldApproval(
        id=short,
        run_id="someone-else",
        thread_id="t",
        call_id="c",
        tool="x",
        arguments={},
        reason="r",
        created_at=clock.now,
    )
    await (await bus.kv(APPROVALS_BUCKET)).create(short, squatter.model_dump_json().encode())
    held = await hold(store)
    assert held.id == longer
    assert await store.get(short) == squatter
    assert await store.for_run("run-1") == [held]
    assert await hold(store) == held  # stable: found again under the longer id


async def test_another_call_under_a_held_calls_id_keeps_both_listed(bus: Bus) -> None:
    """A second call under a held call's id (other arguments: not the same call, law 10)
    gets a record of its own, and the run still lists the first: taking the longer id
    must not drop the first record's index, which is the same key within one run."""
    store = ApprovalStore(bus)
    first = await hold(store, path="a.txt")
    second = await hold(store, path="b.txt")
    assert second.id != first.id
    assert [r.id for r in await store.for_run("run-1")] == [first.id, second.id]
    assert await hold(store, path="a.txt") == first
    assert await hold(store, path="b.txt") == second


async def test_a_decision_is_recorded_once(bus: Bus, clock: FakeClock) -> None:
    store = ApprovalStore(bus)
    held = await hold(store)
    clock.advance(90)
    approved = await store.decide(held.id, approve=True, edited_arguments={"path": "b.txt"})
    assert approved == held.model_copy(
        update={
            "status": "approved",
            "decided_at": clock.now,
            "edited_arguments": {"path": "b.txt"},
        }
    )
    assert await store.get(held.id) == approved
    with pytest.raises(AlreadyDecided, match=r"already decided \(approved\)") as twice:
        await store.decide(held.id, approve=False, reason="changed my mind")
    assert twice.value.approval == approved
    assert await store.get(held.id) == approved  # the first decision stands


async def test_a_denial_keeps_its_reason(bus: Bus, clock: FakeClock) -> None:
    store = ApprovalStore(bus)
    held = await hold(store)
    denied = await store.decide(held.id, approve=False, reason="not that file")
    assert (denied.status, denied.decision_reason, denied.decided_at) == (
        "denied",
        "not that file",
        clock.now,
    )
    with pytest.raises(AlreadyDecided, match="denied: not that file"):
        await store.decide(held.id, approve=True)


async def test_two_people_deciding_at_once_one_wins(bus: Bus) -> None:
    store = ApprovalStore(bus)
    held = await hold(store)
    outcomes = await asyncio.gather(
        store.decide(held.id, approve=True),
        ApprovalStore(bus).decide(held.id, approve=False, reason="no"),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if isinstance(o, HeldApproval)]
    losers = [o for o in outcomes if isinstance(o, AlreadyDecided)]
    assert len(winners) == 1 and len(losers) == 1
    assert await store.get(held.id) == winners[0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"approve": False}, "a denial needs a reason"),
        ({"approve": False, "reason": ""}, "a denial needs a reason"),
        (
            {"approve": False, "reason": "no", "edited_arguments": {"a": 1}},
            "go with an approval",
        ),
        ({"approve": True, "edited_arguments": ["a"]}, "must be a JSON object"),
        ({"approve": True, "edited_arguments": {"a": object()}}, "must be JSON"),
    ],
)
async def test_a_malformed_decision_is_refused(
    bus: Bus, kwargs: dict[str, object], message: str
) -> None:
    store = ApprovalStore(bus)
    held = await hold(store)
    with pytest.raises(UsageError, match=message):
        await store.decide(held.id, **kwargs)  # type: ignore[arg-type]
    assert (await store.get(held.id)).pending


async def test_expired_records_cannot_be_decided(bus: Bus) -> None:
    store = ApprovalStore(bus)
    held = await hold(store)
    expired = await store.expire(held.id, "the run finished without it")
    assert (expired.status, expired.decision_reason) == ("expired", "the run finished without it")
    with pytest.raises(AlreadyDecided, match="expired"):
        await store.decide(held.id, approve=True)


async def test_list_filters_by_status_oldest_first(bus: Bus, clock: FakeClock) -> None:
    store = ApprovalStore(bus)
    first = await hold(store, call_id="c-1")
    clock.advance(1)
    second = await hold(store, call_id="c-2")
    clock.advance(1)
    third = await hold(store, call_id="c-3")
    decided = await store.decide(second.id, approve=True)
    assert await store.list() == [first, decided, third]
    assert await store.list("pending") == [first, third]
    assert await store.list("approved") == [decided]
    assert await store.list("denied") == []
    with pytest.raises(UsageError, match="the statuses are pending, approved, denied, expired"):
        await store.list("maybe")  # type: ignore[arg-type]


@pytest.mark.parametrize("approval_id", ["ap-00000000", "nope", "run/run-1/ap-1", ""])
async def test_unknown_ids(bus: Bus, approval_id: str) -> None:
    store = ApprovalStore(bus)
    await hold(store)
    with pytest.raises(UnknownApproval, match="tiller approvals list"):
        await store.get(approval_id)
    with pytest.raises(NotFound):
        await store.decide(approval_id, approve=True)


async def test_a_call_whose_arguments_are_not_an_object_is_not_held(bus: Bus) -> None:
    store = ApprovalStore(bus)
    for text in ("[1, 2]", "{not json"):
        with pytest.raises(UsageError, match="call-9"):
            await store.hold(
                ToolCall(id="call-9", name="x", arguments=text),
                run_id="r",
                thread_id="t",
                reason="asks",
            )
    with pytest.raises(UsageError, match="reason"):
        await store.hold(call(), run_id="r", thread_id="t", reason="")
    assert await store.list() == []


async def test_holding_a_suspended_runs_interrupts(bus: Bus, tmp_path: Path) -> None:
    """What the gate does after suspending: one record per `tool_call` interrupt."""
    calls = (call("c-read", path="a"), call("c-write", path="b"), call("c-send", to="x"))
    state = RunState(
        run_id="run-7",
        thread_id="thread-7",
        messages=[UserMessage(text="go"), AssistantMessage(id="m-1", tool_calls=calls)],
        taint=(Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT).value,
        policy={"jail_root": str(tmp_path)},
        interrupts=[
            {"id": "approve-c-write", "reason": "tool_call", "toolCallId": "c-write"},
            {"id": "approve-c-send", "reason": "tool_call", "toolCallId": "c-send"},
            {"id": "q-1", "reason": "question"},
        ],
    )
    store = ApprovalStore(bus)
    held = await store.hold_interrupts(state, reason="needs a person", risks={"c-send": "network"})
    assert [(h.call_id, h.risk) for h in held] == [("c-write", None), ("c-send", "network")]
    for record in held:
        assert (record.run_id, record.thread_id, record.reason) == (
            "run-7",
            "thread-7",
            "needs a person",
        )
        assert record.taint == Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT
        assert record.workspace == str(tmp_path)
    assert held[1].arguments == {"to": "x"}
    assert await store.for_run("run-7") == held
    assert await store.hold_interrupts(state) == held  # again: the same records


# ── records this tiller did not write ────────────────────────────────────────────────


def _valid() -> dict[str, object]:
    return {
        "schema_version": 1,
        "id": "ap-bad",
        "run_id": "r",
        "thread_id": "t",
        "call_id": "c",
        "tool": "x",
        "arguments": {},
        "risk": None,
        "reason": "r",
        "taint": [],
        "workspace": None,
        "created_at": 1.0,
        "status": "pending",
        "decided_at": None,
        "decision_reason": None,
        "edited_arguments": None,
    }


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (orjson.dumps({**_valid(), "schema_version": 2}), "schema version 2; this tiller reads 1"),
        (orjson.dumps({k: v for k, v in _valid().items() if k != "run_id"}), "'run_id'"),
        (orjson.dumps({**_valid(), "status": "maybe"}), "'status'"),
        (orjson.dumps({**_valid(), "taint": ["radioactive"]}), "unknown taint 'radioactive'"),
        (orjson.dumps({**_valid(), "taint": "private_data"}), "list of flag names"),
        (orjson.dumps({**_valid(), "arguments": [1]}), "'arguments'"),
        (orjson.dumps({**_valid(), "created_at": "yesterday"}), "'created_at'"),
        (orjson.dumps({**_valid(), "decided_by": "me"}), "'decided_by'"),
        (orjson.dumps({**_valid(), "id": "ap-other"}), "its id is 'ap-other'"),
    ],
)
async def test_a_malformed_record_is_refused_naming_its_key(
    bus: Bus, value: bytes, problem: str
) -> None:
    await (await bus.kv(APPROVALS_BUCKET)).put("ap-bad", value)
    store = ApprovalStore(bus)
    with pytest.raises(MalformedApproval, match="tiller-approvals/ap-bad: ") as raised:
        await store.get("ap-bad")
    assert problem in str(raised.value)
    assert (raised.value.bucket, raised.value.key) == (APPROVALS_BUCKET, "ap-bad")
    with pytest.raises(MalformedApproval):
        await store.list()
    with pytest.raises(MalformedApproval):
        await store.decide("ap-bad", approve=True)


async def test_a_valid_hand_written_record_reads(bus: Bus) -> None:
    """The malformed cases above differ from this one in one field each."""
    await (await bus.kv(APPROVALS_BUCKET)).put("ap-bad", orjson.dumps(_valid()))
    assert (await ApprovalStore(bus).get("ap-bad")).taint == Taint.NONE
