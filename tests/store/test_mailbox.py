"""`MailboxStore`: messages between agents, on every backend (memory, a SQLite file, the
NATS server), with a fake clock so every timestamp is exact.

What matters: the sender's identity and taint are kept as stamped; a message is claimed
once (also when two runs race); a claim with nothing new reads one record; the size limit
and the pending cap refuse before anything is stored (the cap exactly, under concurrent
sends, and not counting messages a crashed receiver left in the index); records this
tiller did not write are moved aside, logged and never delivered; a send wakes a waiting
recipient through its subject.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from tiller.conversation import Taint
from tiller.errors import UsageError
from tiller.store import (
    MAILBOX_BUCKET,
    Bus,
    MailboxFull,
    MailboxStore,
    MailIdentity,
    MailMessage,
    MessageTooLarge,
    QuarantinedMail,
)

from .conftest import FakeClock

HANG_GUARD = 20.0  # seconds; never reached unless something is broken

ALICE = MailIdentity("alice", session="thread-a", run_id="run-a")
BOTH = Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT


async def send(store: MailboxStore, text: str = "hi bob", **kw: object) -> MailMessage:
    to = kw.pop("to", "bob")
    assert isinstance(to, str)
    taint = kw.pop("taint", Taint.NONE)
    assert isinstance(taint, Taint)
    return await store.send(to, text, sender=ALICE, taint=taint)


async def test_a_message_keeps_who_sent_it_and_its_taint(bus: Bus, clock: FakeClock) -> None:
    store = MailboxStore(bus)
    sent = await send(store, "the report is ready", taint=Taint.UNTRUSTED_INPUT)
    assert sent == MailMessage(
        id=sent.id,
        to="bob",
        sender="alice",
        sender_session="thread-a",
        sender_run="run-a",
        text="the report is ready",
        taint=Taint.UNTRUSTED_INPUT,
        status="pending",
        sent_at=clock.now,
    )
    # Stored as the module docstring says: taint by flag name, under msg/<to>/<id>.
    kv = await bus.kv(MAILBOX_BUCKET)
    entry = await kv.get(f"msg/bob/{sent.id}")
    assert entry is not None
    record = orjson.loads(entry.value)
    assert record["schema_version"] == 1
    assert record["taint"] == ["untrusted_input"]
    assert await store.list() == [sent]

    clock.advance(5)
    taken: list[MailMessage] = []
    claim = await store.claim("bob", run_id="run-b", session="thread-b", on_claimed=taken.append)
    delivered = sent.model_copy(
        update={
            "status": "delivered",
            "delivered_at": clock.now,
            "delivered_run": "run-b",
            "delivered_session": "thread-b",
        }
    )
    assert claim.messages == taken == [delivered]
    assert await store.list(status="pending") == []
    assert await store.list("bob", status="delivered") == [delivered]
    assert not await store.has_pending("bob")


async def test_messages_come_oldest_first_and_only_to_their_recipient(bus: Bus) -> None:
    store = MailboxStore(bus)
    first = await send(store, "one")
    await send(store, "for carol", to="carol")
    second = await send(store, "two")
    claim = await store.claim("bob")
    assert [m.id for m in claim.messages] == [first.id, second.id]
    assert [m.text for m in await store.list("carol", "pending")] == ["for carol"]
    # A name that merely starts like another one is another mailbox.
    await send(store, "to bobby", to="bobby")
    assert (await store.claim("bob")).messages == []


async def test_a_claim_with_nothing_new_lists_nothing(bus: Bus) -> None:
    store = MailboxStore(bus)
    await send(store)
    claim = await store.claim("bob")
    assert len(claim.messages) == 1 and claim.revision is not None
    kv = await bus.kv(MAILBOX_BUCKET)
    listings = 0
    real_keys = kv.keys

    async def counting_keys(prefix: str = "") -> list[str]:
        nonlocal listings
        listings += 1
        return await real_keys(prefix)

    kv.keys = counting_keys  # type: ignore[method-assign]
    store._kv = kv
    again = await store.claim("bob", since=claim.revision)
    assert again.messages == [] and again.revision == claim.revision
    assert listings == 0
    await send(store, "news")
    news = await store.claim("bob", since=claim.revision)
    assert [m.text for m in news.messages] == ["news"]
    assert listings == 1


async def test_a_claim_limit_leaves_the_rest_for_the_next_claim(bus: Bus) -> None:
    store = MailboxStore(bus)
    for n in range(3):
        await send(store, f"m{n}")
    first = await store.claim("bob", limit=2)
    assert [m.text for m in first.messages] == ["m0", "m1"]
    assert first.revision is None  # look again: something was left
    rest = await store.claim("bob", since=first.revision)
    assert [m.text for m in rest.messages] == ["m2"]


async def test_two_runs_claiming_at_once_take_each_message_once(bus: Bus) -> None:
    store = MailboxStore(bus)
    sent = [await send(store, f"m{n}") for n in range(6)]
    other = MailboxStore(bus)
    async with asyncio.timeout(HANG_GUARD):
        a, b = await asyncio.gather(store.claim("bob", run_id="a"), other.claim("bob", run_id="b"))
    taken = [m.id for m in a.messages] + [m.id for m in b.messages]
    assert sorted(taken) == sorted(m.id for m in sent)
    assert {m.delivered_run for m in await store.list("bob")} <= {"a", "b"}
    assert not await store.has_pending("bob")


async def test_the_size_limit_and_bad_names_refuse_before_anything_is_stored(bus: Bus) -> None:
    store = MailboxStore(bus, max_bytes=10)
    with pytest.raises(MessageTooLarge, match="11 bytes; a message holds at most 10"):
        await send(store, "x" * 11)
    with pytest.raises(MessageTooLarge):
        await send(store, "é" * 6)  # bytes, not characters
    await send(store, "x" * 10)
    with pytest.raises(UsageError, match="needs some text"):
        await send(store, "  ")
    for bad in ("", "bob/x", "bob.x", "-bob", "b" * 65, "bob*"):
        with pytest.raises(UsageError, match="cannot be a recipient"):
            await send(store, to=bad)
    with pytest.raises(UsageError, match="cannot be an agent name"):
        MailIdentity("alice smith")
    assert len(await store.list()) == 1


async def test_the_pending_cap_refuses_a_send_until_the_recipient_reads(bus: Bus) -> None:
    store = MailboxStore(bus, max_pending=2)
    await send(store, "one")
    await send(store, "two")
    with pytest.raises(MailboxFull, match="'bob' is full: 2 messages"):
        await send(store, "three")
    await send(store, "for carol", to="carol")  # per recipient
    assert [m.text for m in await store.list("bob")] == ["one", "two"]
    await store.claim("bob", limit=1)
    await send(store, "three")
    with pytest.raises(MailboxFull):
        await send(store, "four")


async def test_the_cap_holds_exactly_under_concurrent_sends(bus: Bus) -> None:
    store = MailboxStore(bus, max_pending=3)
    senders = [MailboxStore(bus, max_pending=3) for _ in range(6)]
    async with asyncio.timeout(HANG_GUARD):
        outcomes = await asyncio.gather(
            *(
                s.send("bob", f"m{n}", sender=ALICE, taint=Taint.NONE)
                for n, s in enumerate(senders)
            ),
            return_exceptions=True,
        )
    sent = [o for o in outcomes if isinstance(o, MailMessage)]
    refused = [o for o in outcomes if isinstance(o, MailboxFull)]
    assert len(sent) == 3 and len(refused) == 3
    assert sorted(m.id for m in await store.list("bob")) == sorted(m.id for m in sent)


async def test_ids_a_crashed_receiver_left_in_the_index_do_not_count(bus: Bus) -> None:
    store = MailboxStore(bus, max_pending=2)
    one = await send(store, "one")
    two = await send(store, "two")
    # A receiver took both (pending → delivered) and died before updating the head.
    kv = await bus.kv(MAILBOX_BUCKET)
    for message in (one, two):
        delivered = message.model_copy(update={"status": "delivered"})
        await kv.put(f"msg/bob/{message.id}", delivered.model_dump_json().encode())
    await send(store, "three")
    head = await kv.get("head/bob")
    assert head is not None
    assert len(orjson.loads(head.value)["pending"]) == 1


async def test_unreadable_records_are_moved_aside_and_never_delivered(
    bus: Bus, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = MailboxStore(bus, max_bytes=100)
    good = await send(store, "hello")
    kv = await bus.kv(MAILBOX_BUCKET)
    record = orjson.loads(good.model_dump_json())
    without_taint = {k: v for k, v in record.items() if k != "taint"}
    bad = {
        "0000000000000001-00000001": b"not json",
        "0000000000000002-00000002": orjson.dumps(
            {**without_taint, "id": "0000000000000002-00000002"}
        ),
        "0000000000000003-00000003": orjson.dumps(
            {**record, "id": "0000000000000003-00000003", "to": "carol"}
        ),
        "0000000000000004-00000004": orjson.dumps(
            {**record, "id": "0000000000000004-00000004", "schema_version": 99}
        ),
        "0000000000000005-00000005": orjson.dumps(
            {**record, "id": "0000000000000005-00000005", "text": "x" * 101}
        ),
        "0000000000000006-00000006": orjson.dumps(
            {**record, "id": "0000000000000006-00000006", "taint": ["admin"]}
        ),
        "not-an-id": orjson.dumps({**record, "id": "not-an-id"}),
    }
    for suffix, value in bad.items():
        await kv.put(f"msg/bob/{suffix}", value)
    # Listing reads and changes nothing.
    with caplog.at_level(logging.WARNING, logger="tiller.store._mailbox"):
        assert await store.list("bob") == [good]
    assert len(await kv.keys("msg/bob/")) == len(bad) + 1

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tiller.store._mailbox"):
        claim = await store.claim("bob")
    assert [m.id for m in claim.messages] == [good.id]
    assert await kv.keys("msg/bob/") == [f"msg/bob/{good.id}"]
    moved = {q.key: q for q in await store.quarantined("bob")}
    assert set(moved) == {f"msg/bob/{suffix}" for suffix in bad}
    assert moved["msg/bob/0000000000000001-00000001"] == QuarantinedMail(
        key="msg/bob/0000000000000001-00000001",
        problem=moved["msg/bob/0000000000000001-00000001"].problem,
        raw="not json",
        quarantined_at=clock.now,
    )
    assert "not JSON" in moved["msg/bob/0000000000000001-00000001"].problem
    assert "taint" in moved["msg/bob/0000000000000002-00000002"].problem
    assert "addressed to 'carol'" in moved["msg/bob/0000000000000003-00000003"].problem
    assert "schema version 99" in moved["msg/bob/0000000000000004-00000004"].problem
    assert "over the 100 limit" in moved["msg/bob/0000000000000005-00000005"].problem
    assert "unknown taint 'admin'" in moved["msg/bob/0000000000000006-00000006"].problem
    assert sum("never delivered" in r.getMessage() for r in caplog.records) == len(bad)
    assert (await store.claim("bob")).messages == []


async def test_an_unreadable_head_is_rebuilt(bus: Bus) -> None:
    store = MailboxStore(bus)
    kv = await bus.kv(MAILBOX_BUCKET)
    await kv.put("head/bob", b"{}")
    await send(store, "still arrives")
    assert [m.text for m in (await store.claim("bob")).messages] == ["still arrives"]


async def test_a_send_hints_on_the_recipients_subject(bus: Bus) -> None:
    store = MailboxStore(bus)
    assert MailboxStore.subject("bob") == "tiller.mailbox.bob"
    subscription = await bus.subscribe("tiller.mailbox.bob")
    try:
        sent = await send(store)
        async with asyncio.timeout(HANG_GUARD):
            message = await anext(aiter(subscription))
    finally:
        await subscription.aclose()
    assert orjson.loads(message.data) == {"schema_version": 1, "kind": "mail", "id": sent.id}


async def test_a_waiting_recipient_wakes_when_mail_arrives(bus: Bus) -> None:
    store = MailboxStore(bus)
    async with asyncio.timeout(HANG_GUARD):
        # A poll interval no test reaches: it wakes by the hint.
        waiting = asyncio.ensure_future(store.wait_for_mail("bob", poll_interval=3600))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await send(store, to="carol")
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await MailboxStore(bus).send("bob", "wake up", sender=ALICE, taint=Taint.NONE)
        await waiting
    # Mail already waiting: it returns at once.
    async with asyncio.timeout(HANG_GUARD):
        await store.wait_for_mail("bob")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await store.wait_for_mail("carol-2")
    # Giving up (or returning) leaves no listener behind.
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith("mail-wait")] == []
