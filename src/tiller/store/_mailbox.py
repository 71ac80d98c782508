"""The mailbox: messages between agents, kept in the store (DESIGN §7, `tiller-mailbox`).

An agent writes to another by name (`message_send`, or a person with `tiller mail send`);
the recipient's runs take the message at the top of a step and read it as a message *from
that agent*, never as the user's words. The store is the truth: a message is a KV record
first and a pub/sub hint second, so a recipient that was offline, reconnecting or polling
still finds it.

Who wrote a message is stamped by the runtime (the sending run's agent name, thread and
run id), never by the model, and so is the sender's taint: the recipient merges it into
its own before it reads the text (law 6), and a record without a readable taint is never
delivered.

Keys in the bucket (names are `[A-Za-z0-9_-]`, so they never add a path segment):

- `msg/<to>/<id>`: `{schema_version, id, to, sender, sender_session, sender_run, text,
  taint, status, sent_at, delivered_at, delivered_run, delivered_session}`. An id is
  `<wall time in ns, 16 hex digits>-<8 random hex digits>`: ids sort in time order;
- `head/<to>`: `{schema_version, to, pending, latest}`, the recipient's index: the ids it
  has pending (for the cap), rewritten by compare-and-set after every send and claim. A
  receiver compares its revision with the one it last saw and lists the recipient's
  messages only when it changed, so an idle check is one point read (on NATS a listing
  scans the whole bucket);
- `bad/<to>/<id>`: a record that could not be read, moved aside by the receiver that met
  it (`{schema_version, key, problem, raw, quarantined_at}`), logged, never delivered.

```
pending ──claim (compare-and-set)──► delivered
```

A claim records the claiming run (`delivered_run`); the run's state records the ids it
folded (`RunState.folded_mail`), and a continuation of the run hands it again what its
run claimed but never checkpointed (see `MailboxStore.claim`: `folded=`, `fence=`).

A send checks the text's size (`max_bytes`) and the recipient's pending messages
(`max_pending`; ids in the head whose record is no longer pending are dropped before a
send is refused), writes the record, then adds its id to the head. Of two runs claiming
one message, exactly one gets it. A hint goes on `tiller.mailbox.<to>`:
`{"schema_version": 1, "kind": "mail", "id": "<id>"}`; `wait_for_mail` wakes on it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import ClassVar, Final, Literal, get_args

import orjson

from ..conversation import Taint
from ..errors import UsageError
from ._bus import Bus, Entry, KeyValue, RevisionConflict, StoreError, Subscription
from ._ordered_ids import ORDERED_ID, OrderedIds
from ._records import MalformedRecord, Record, TaintNames, create_or_get, decode, encode

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_PENDING",
    "MAILBOX_BUCKET",
    "MailClaim",
    "MailIdentity",
    "MailMessage",
    "MailStatus",
    "MailboxFull",
    "MailboxStore",
    "MalformedMail",
    "MessageTooLarge",
    "QuarantinedMail",
    "check_mail_name",
]

_logger: Final = logging.getLogger(__name__)

#: The mailbox bucket's default name (DESIGN §7).
MAILBOX_BUCKET = "tiller-mailbox"
#: The largest message text, in UTF-8 bytes.
DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024
#: How many messages one recipient may have waiting before sends to it are refused.
DEFAULT_MAX_PENDING = 50

MailStatus = Literal["pending", "delivered"]
_STATUSES: tuple[str, ...] = get_args(MailStatus)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_SUBJECT_ROOT = "tiller.mailbox"
_MESSAGE_VERSION = 1


# ── errors ───────────────────────────────────────────────────────────────────────────


class MalformedMail(MalformedRecord):
    """A record of the mailbox bucket does not have the shape this tiller writes."""


class MailboxFull(StoreError):
    """The recipient already has `limit` messages waiting; try again once it read some."""

    def __init__(self, to: str, limit: int) -> None:
        super().__init__(
            f"the mailbox of {to!r} is full: {limit} messages are waiting to be read; "
            "send again once it has read some"
        )
        self.to = to
        self.limit = limit


class MessageTooLarge(UsageError):
    """The message's text is over the mailbox's size limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"the message is {size} bytes; a message holds at most {limit} bytes "
            "(send a shorter one, or point to a file)"
        )
        self.size = size
        self.limit = limit


# ── names and ids ────────────────────────────────────────────────────────────────────


def check_mail_name(name: str, what: str = "an agent name") -> str:
    """Return `name` if it can address a mailbox (1 to 64 letters, digits, `_` and `-`,
    starting with a letter or digit), else raise `UsageError` saying so."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(
            f"{name!r} cannot be {what} for the mailbox: use 1 to 64 letters, digits, "
            "'_' and '-', starting with a letter or a digit"
        )
    return name


def _message_prefix(to: str) -> str:
    return f"msg/{to}/"


def _head_key(to: str) -> str:
    return f"head/{to}"


def _bad_prefix(to: str) -> str:
    return f"bad/{to}/"


# ── records ──────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class MailIdentity:
    """Who a run is, for the mailbox: its agent's name, its thread (session) and run id.
    The runtime builds it; the model never does."""

    name: str
    session: str | None = None
    run_id: str | None = None

    def __post_init__(self) -> None:
        check_mail_name(self.name)


class MailMessage(Record):
    """One message and what became of it."""

    ledger_kind: ClassVar[str] = "mail"

    id: str
    #: The recipient: an agent name, not a session (any run of that agent may read it).
    to: str
    #: The sender's agent name, its thread and run (None for a person at the CLI).
    sender: str
    sender_session: str | None = None
    sender_run: str | None = None
    text: str
    #: The sender's taint when it sent; required: a message without it is not delivered.
    taint: TaintNames
    status: MailStatus = "pending"
    sent_at: float
    delivered_at: float | None = None
    delivered_run: str | None = None
    delivered_session: str | None = None


class QuarantinedMail(Record):
    """A record that could not be read, as it was, and why (never delivered)."""

    ledger_kind: ClassVar[str] = "mail"

    key: str
    problem: str
    raw: str
    quarantined_at: float


class _MailHead(Record):
    ledger_kind: ClassVar[str] = "mail"

    to: str
    pending: list[str]
    latest: str | None = None


@dataclass(frozen=True, slots=True)
class MailClaim:
    """What one `claim` took (in id order), and the head revision to pass as `since`
    next time (None: look again, some messages were left for later)."""

    messages: list[MailMessage]
    revision: int | None


# ── the store ────────────────────────────────────────────────────────────────────────


class MailboxStore:
    """Inter-agent messages in one bucket of a `Bus` (see the module docstring)."""

    def __init__(
        self,
        bus: Bus,
        bucket: str = MAILBOX_BUCKET,
        *,
        max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        if max_bytes < 1 or max_pending < 1:
            raise UsageError("a mailbox needs max_bytes and max_pending of at least 1")
        self.bus = bus
        self.bucket = bucket
        self._ids = OrderedIds()
        self.max_bytes = max_bytes
        self.max_pending = max_pending
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    @staticmethod
    def subject(to: str) -> str:
        """The pub/sub subject of `to`'s hints."""
        return f"{_SUBJECT_ROOT}.{check_mail_name(to, 'a recipient')}"

    # ── sending ──────────────────────────────────────────────────────────────────

    async def send(
        self,
        to: str,
        text: str,
        *,
        sender: MailIdentity,
        taint: Taint,
    ) -> MailMessage:
        """Leave `text` for `to`, from `sender`, stamped with `taint`. Raises
        `MessageTooLarge`, `MailboxFull`, or `UsageError` for a bad name or blank text."""
        check_mail_name(to, "a recipient")
        if not isinstance(text, str) or not text.strip():
            raise UsageError("a message needs some text")
        size = len(text.encode())
        if size > self.max_bytes:
            raise MessageTooLarge(size, self.max_bytes)
        if not isinstance(taint, Taint):
            raise UsageError(f"a message's taint must be a Taint, not {type(taint).__name__}")
        message = MailMessage(
            id=self._ids.next(),
            to=to,
            sender=sender.name,
            sender_session=sender.session,
            sender_run=sender.run_id,
            text=text,
            taint=taint,
            sent_at=self.bus.clock(),
        )
        kv = await self._bucket()
        key = _message_prefix(to) + message.id
        written: int | None = None  # the record's revision once created
        try:
            while True:
                entry = await kv.get(_head_key(to))
                pending = self._head(to, entry).pending
                if len(pending) >= self.max_pending:
                    pending = await self._still_pending(kv, to, pending)
                    if len(pending) >= self.max_pending:
                        raise MailboxFull(to, self.max_pending)
                if written is None:
                    # The record before the head: an id in a head always has its record.
                    written = await kv.create(key, encode(message))
                head = _MailHead(to=to, pending=[*pending, message.id], latest=message.id)
                if await self._write_head(kv, to, entry, head) is not None:
                    break
        except MailboxFull:
            if written is not None:  # another sender took the last place meanwhile
                try:
                    # Only if no one took it: a recipient may already have claimed the
                    # record (it was visible): then it was delivered, and is reported sent.
                    await kv.delete(key, expected=written)
                except RevisionConflict:
                    return message
                except StoreError:
                    pass
            raise
        await self._notify(to, message.id)
        return message

    async def _notify(self, to: str, message_id: str) -> None:
        """Publish the hint. The message is already stored, so a failed publish only
        delays it until the recipient looks: it is logged, not raised."""
        data = orjson.dumps({"schema_version": _MESSAGE_VERSION, "kind": "mail", "id": message_id})
        try:
            await self.bus.publish(self.subject(to), data)
        except StoreError as exc:
            _logger.warning(
                "message %s for %s is stored, but its hint was not sent (%s); "
                "it is read when %s next looks",
                message_id,
                to,
                exc,
                to,
            )

    # ── receiving ────────────────────────────────────────────────────────────────

    async def head_revision(self, to: str) -> int:
        """The revision of `to`'s head (0: no message was ever sent to it)."""
        kv = await self._bucket()
        entry = await kv.get(_head_key(check_mail_name(to, "a recipient")))
        return 0 if entry is None else entry.revision

    async def claim(
        self,
        to: str,
        *,
        run_id: str | None = None,
        session: str | None = None,
        since: int | None = None,
        limit: int | None = None,
        on_claimed: Callable[[MailMessage], None] | None = None,
        folded: Collection[str] | None = None,
        fence: Callable[[], Awaitable[None]] | None = None,
    ) -> MailClaim:
        """Take `to`'s pending messages (at most `limit`, oldest first) for the run
        `run_id` of thread `session`: each becomes `delivered`, and `on_claimed` is called
        with it as soon as it is (with no `await` between, so a cancel cannot fall
        between taking a message and handing it over). With `since` equal to the head's
        revision nothing was sent since the last claim, and nothing is listed.

        Exactly once across a crash and a takeover (issue 16): `folded` is what the
        run's state says it folded (`RunState.folded_mail`). A message delivered to
        `run_id` that is not in it was claimed by a process of the run that died (or
        was taken over) before its checkpoint: it is handed to `on_claimed` again, once
        more oldest first, within `limit`. `fence` is awaited before each message is
        taken or handed again: the run's lease check (`RunDurability.check_lease`),
        which raises `LeaseLost` in a process whose run was taken over, so a stale
        holder claims nothing more (and what it claims in the moment between its check
        and its claim is handed again to the run's new holder, which never folded it).

        Records that cannot be read are moved aside (`bad/...`) and logged."""
        check_mail_name(to, "a recipient")
        if limit is not None and limit < 1:
            raise UsageError("a claim limit must be at least 1")
        ours = set(folded) if folded is not None and run_id is not None else None
        kv = await self._bucket()
        head_entry = await kv.get(_head_key(to))
        start = 0 if head_entry is None else head_entry.revision
        if since is not None and since == start:
            return MailClaim([], start)
        indexed = self._head(to, head_entry).pending
        prefix = _message_prefix(to)
        found: list[tuple[str, Entry, MailMessage]] = []
        for key in await kv.keys(prefix):
            entry = await kv.get(key)
            if entry is None:
                continue  # deleted meanwhile
            message = await self._read_or_quarantine(kv, to, key, entry)
            if message is None:
                continue
            if message.status == "pending" or (
                ours is not None and message.delivered_run == run_id and message.id not in ours
            ):
                found.append((key, entry, message))
        found.sort(key=lambda item: item[2].id)
        taken: list[MailMessage] = []
        left_over = False
        for key, entry, message in found:
            if limit is not None and len(taken) >= limit:
                left_over = True
                break
            if fence is not None:
                await fence()
            if message.status == "pending":
                claimed = await self._take(kv, key, entry, message, run_id=run_id, session=session)
            else:  # ours already, never folded: handed again, as it is stored
                claimed = message
            if claimed is not None:
                taken.append(claimed)
                if on_claimed is not None:
                    on_claimed(claimed)
        pending = [message for _, _, message in found if message.status == "pending"]
        waiting = {message.id for message in pending} - {m.id for m in taken}
        # Drop from the index what was taken, and what it listed that is no longer
        # pending (ids added after the listing are not ours to judge).
        done = {m.id for m in taken} | (set(indexed) - waiting)
        written = await self._prune_head(kv, to, done, start)
        revision = None if left_over else written
        return MailClaim(taken, revision)

    async def _take(
        self,
        kv: KeyValue,
        key: str,
        entry: Entry,
        message: MailMessage,
        *,
        run_id: str | None,
        session: str | None,
    ) -> MailMessage | None:
        """pending → delivered, by compare-and-set; None if another run took it first."""
        while True:
            claimed = message.model_copy(
                update={
                    "status": "delivered",
                    "delivered_at": self.bus.clock(),
                    "delivered_run": run_id,
                    "delivered_session": session,
                }
            )
            try:
                await kv.update(key, encode(claimed), expected=entry.revision)
            except RevisionConflict:
                fresh = await kv.get(key)
                if fresh is None:
                    return None
                current = await self._read_or_quarantine(kv, message.to, key, fresh)
                if current is None or current.status != "pending":
                    return None
                entry, message = fresh, current
                continue
            return claimed

    async def _prune_head(self, kv: KeyValue, to: str, done: set[str], seen: int) -> int:
        """Remove `done` from the head. Returns the revision a later claim may skip at:
        the one written, if no one changed the head since the claim read it at `seen`;
        else `seen` (which differs from the head now, so the next claim looks again)."""
        while True:
            entry = await kv.get(_head_key(to))
            if entry is None:
                return seen
            head = self._head(to, entry)
            if not done & set(head.pending):
                return seen
            pending = [item for item in head.pending if item not in done]
            updated = head.model_copy(update={"pending": pending})
            written = await self._write_head(kv, to, entry, updated)
            if written is not None:
                return written if entry.revision == seen else seen

    async def has_pending(self, to: str) -> bool:
        """Whether `to` has messages waiting (by its head: a point read or a few)."""
        kv = await self._bucket()
        entry = await kv.get(_head_key(check_mail_name(to, "a recipient")))
        return bool(await self._still_pending(kv, to, self._head(to, entry).pending))

    async def wait_for_mail(self, to: str, *, poll_interval: float = 0.5) -> None:
        """Return once `to` has a message waiting. Wakes on the recipient's hints, and
        looks every `poll_interval` seconds anyway, so a lost hint only delays it. No
        `timeout=`: wrap it in `asyncio.timeout` to give up."""
        if not poll_interval > 0:
            raise UsageError(f"poll_interval must be positive seconds, not {poll_interval!r}")
        subject = self.subject(to)
        wake = asyncio.Event()
        subscription: Subscription | None = None
        try:
            subscription = await self.bus.subscribe(subject)
        except StoreError as exc:
            _logger.warning("no hints for %s (%s); polling every %gs", to, exc, poll_interval)

        async def listen(source: Subscription) -> None:
            with contextlib.suppress(StoreError):
                async for _ in source:
                    wake.set()

        listener = (
            asyncio.get_running_loop().create_task(listen(subscription), name=f"mail-wait {to}")
            if subscription is not None
            else None
        )
        try:
            while True:
                wake.clear()  # before looking: a hint that comes after is not lost
                if await self.has_pending(to):
                    return
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll_interval):
                        await wake.wait()
        finally:
            # Closing the subscription ends the listener's loop; the cancel is repeated
            # in case one is lost (Python 3.11 can drop a cancel inside `wait_for`).
            if subscription is not None:
                with contextlib.suppress(Exception):
                    await subscription.aclose()
            waiting = {listener} if listener is not None else set()
            while waiting:
                for task in waiting:
                    task.cancel()
                _, waiting = await asyncio.wait(waiting, timeout=0.1)

    # ── reading ──────────────────────────────────────────────────────────────────

    async def list(
        self, to: str | None = None, status: MailStatus | None = None
    ) -> builtins.list[MailMessage]:
        """Every message (to `to`, with `status`), oldest first. Records that cannot be
        read are left where they are and logged: listing changes nothing."""
        if status is not None and status not in _STATUSES:
            raise UsageError(f"unknown status {status!r}; the statuses are {', '.join(_STATUSES)}")
        prefix = "msg/" if to is None else _message_prefix(check_mail_name(to, "a recipient"))
        kv = await self._bucket()
        found = []
        for key in await kv.keys(prefix):
            entry = await kv.get(key)
            if entry is None:
                continue
            try:
                message = self._read(key, entry.value)
            except MalformedMail as exc:
                _logger.warning("mailbox record skipped: %s", exc)
                continue
            if status is None or message.status == status:
                found.append(message)
        return sorted(found, key=lambda m: (m.sent_at, m.id))

    async def quarantined(self, to: str | None = None) -> builtins.list[QuarantinedMail]:
        """The records moved aside as unreadable (to `to`), by key."""
        prefix = "bad/" if to is None else _bad_prefix(check_mail_name(to, "a recipient"))
        kv = await self._bucket()
        found = []
        for key in await kv.keys(prefix):
            entry = await kv.get(key)
            if entry is None:
                continue
            try:
                found.append(decode(QuarantinedMail, self.bucket, key, entry.value))
            except MalformedRecord as exc:
                _logger.warning("quarantined mailbox record unreadable: %s", exc)
        return found

    def _read(self, key: str, value: bytes) -> MailMessage:
        """The message stored under `key` (`msg/<to>/<id>`), checked field by field, its
        id and recipient against the key, its size against the limit."""
        parts = key.split("/")
        if len(parts) != 3 or parts[0] != "msg" or not ORDERED_ID.fullmatch(parts[2]):
            raise MalformedMail(self.bucket, key, "not a message key (msg/<to>/<id>)")
        try:
            message = decode(MailMessage, self.bucket, parts[2], value)
        except MalformedRecord as exc:
            raise MalformedMail(self.bucket, key, exc.problem) from None
        if message.to != parts[1]:
            raise MalformedMail(self.bucket, key, f"it is addressed to {message.to!r}")
        if not _NAME.fullmatch(message.sender):
            raise MalformedMail(self.bucket, key, f"its sender {message.sender!r} is no name")
        size = len(message.text.encode())
        if size > self.max_bytes:
            raise MalformedMail(
                self.bucket, key, f"its text is {size} bytes, over the {self.max_bytes} limit"
            )
        return message

    async def _read_or_quarantine(
        self, kv: KeyValue, to: str, key: str, entry: Entry
    ) -> MailMessage | None:
        try:
            return self._read(key, entry.value)
        except MalformedMail as exc:
            await self._quarantine(kv, to, key, entry, exc.problem)
            return None

    async def _quarantine(
        self, kv: KeyValue, to: str, key: str, entry: Entry, problem: str
    ) -> None:
        """Move an unreadable record aside: kept under `bad/`, gone from `msg/`."""
        suffix = key[len(_message_prefix(to)) :]
        record = QuarantinedMail(
            key=key,
            problem=problem,
            raw=entry.value.decode(errors="replace"),
            quarantined_at=self.bus.clock(),
        )
        _logger.warning(
            "mailbox record %s/%s cannot be read (%s); moved to %s, never delivered",
            self.bucket,
            key,
            problem,
            _bad_prefix(to) + suffix,
        )
        await create_or_get(kv, _bad_prefix(to) + suffix, encode(record))
        with contextlib.suppress(RevisionConflict):
            await kv.delete(key, expected=entry.revision)

    # ── the head ─────────────────────────────────────────────────────────────────

    def _head(self, to: str, entry: Entry | None) -> _MailHead:
        if entry is None:
            return _MailHead(to=to, pending=[])
        key = _head_key(to)
        try:
            head = decode(_MailHead, self.bucket, key, entry.value)
            if head.to != to:
                raise MalformedRecord(self.bucket, key, f"it is the head of {head.to!r}")
        except MalformedRecord as exc:
            # Only the index: the messages are listed from their own records. It is
            # rewritten at this revision by the next send or claim.
            _logger.warning("mailbox head %s unreadable (%s); rebuilt", key, exc.problem)
            return _MailHead(to=to, pending=[])
        return head

    async def _write_head(
        self, kv: KeyValue, to: str, entry: Entry | None, head: _MailHead
    ) -> int | None:
        """Write the head at the revision read; None if another writer was first."""
        try:
            if entry is None:
                return await kv.create(_head_key(to), encode(head))
            return await kv.update(_head_key(to), encode(head), expected=entry.revision)
        except RevisionConflict:
            return None

    async def _still_pending(
        self, kv: KeyValue, to: str, ids: builtins.list[str]
    ) -> builtins.list[str]:
        """The ids whose records are there and still pending (a receiver that died
        between taking a message and updating the head leaves its id behind)."""
        kept = []
        for message_id in ids:
            key = _message_prefix(to) + message_id
            entry = await kv.get(key)
            if entry is None:
                continue
            try:
                message = self._read(key, entry.value)
            except MalformedMail:
                continue  # never delivered, so never counted
            if message.status == "pending":
                kept.append(message_id)
        return kept
