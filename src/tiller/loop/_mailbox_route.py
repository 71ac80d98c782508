"""`MailboxRoute`: a run's place in the mailbox — who it is, and whether it receives.

A route is built for a run (`RunContext.with_mailbox(MailboxRoute(store, deliver))`). The
run's identity, its agent's name (or `name=`) and its thread, is stamped by the runtime on
every message it sends, together with the step's taint: the model chooses only the
recipient and the text (`message_send`). `deliver` is the receiver's decision, made when
the route is built, never in the loop: with it off the run can send but reads nothing.

Delivery happens at the top of a step, after steering, and only when the run is about to
make another model call (it was not cancelled, `max_steps` and the budget leave it a
turn): claiming is irreversible, and mail taken by a run that then stops would be lost.
For each message, in order: the sender's taint is merged into the run's (law 6), *then*
the text is folded into the user turn as `[message from agent <name>] ...` — a message
from that agent, never the user's words, so it can neither approve a held call nor
change the run's policy — then `tiller.message_delivered` is emitted. Store failures are
logged and the run goes on; the mail waits for the next step.

Exactly once across a crash and a takeover (issue 16): each message folded is recorded in
the state (`RunState.folded_mail`), which the step's checkpoint carries. Mail the run
claimed in a process that died before that checkpoint is delivered again by the process
that continues the run (the store hands back what was delivered to the run id and is not
in its state), and a durable run checks its lease before each message it takes: a process
whose run was taken over claims nothing more, and stops with `LeaseLost`.

The route is part of the run's recorded policy (`RunState.policy["mailbox"]`, run state
version 6: `to_data` / `from_data`), so a process that continues the run from its
checkpoint (`tiller approve`, `tiller runs resume`) attaches the same mailbox under the
same name. `send_tool=True` says the run was given `message_send` with the route (`tiller
run --mailbox`, `tiller serve --mailbox`): every run under such a route has the tool
(`give_send_tool`), so an agent reloaded by its reference in another process can still
make, and run, the approved send.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..conversation import Taint
from ..errors import UsageError
from ..events import CustomEvent
from ..policy import Interlock, capabilities_of, taint_names
from ..store import (
    MAILBOX_BUCKET,
    Bus,
    LeaseLost,
    MailboxStore,
    MailIdentity,
    MailMessage,
    RunDurability,
    StoreError,
    check_mail_name,
)

if TYPE_CHECKING:
    from ..events import AgUiContext
    from ..state import RunState
    from ..tools import Registry

__all__ = [
    "DELIVERED_EVENT",
    "MailboxRoute",
    "RunMailbox",
    "RunMailer",
    "give_send_tool",
    "mail_frame",
]

_logger: Final = logging.getLogger(__name__)

#: The custom event each delivered message emits.
DELIVERED_EVENT: Final = "tiller.message_delivered"


_MARKER: Final = "[message from agent "


def give_send_tool(registry: Registry, route: MailboxRoute | None) -> Registry:
    """The registry a run under `route` uses: `registry` itself, or, when `route` gives
    `message_send` (`send_tool`) and `registry` has no tool of that name, a copy with it.
    Never `registry` changed: an agent's registry is shared by its runs (a served agent,
    one loaded by reference), and a run without the route must not be offered the tool."""
    if route is None or not route.send_tool:
        return registry
    from ..tools.builtin import message_send

    if registry.get(message_send.name) is not None:
        return registry
    given = registry.copy()
    given.add(message_send)
    return given


def mail_frame(message: MailMessage) -> str:
    """How a delivered message reads in the conversation: from that agent, not the user.
    A marker inside the text is marked as quoted, so a message cannot pose as a second
    one from another agent."""
    text = message.text.replace(_MARKER, "[(quoted) message from agent ")
    return f"{_MARKER}{message.sender}] {text}"


@dataclass(frozen=True, slots=True, init=False)
class MailboxRoute:
    """Connect a run to the mailbox in `store` (a `Bus`, or a `MailboxStore` with its own
    limits). `deliver`: whether the run receives. `name`: the identity's agent name
    (default: the agent's). `max_per_turn`: messages folded into one step at most (the
    rest wait for the next). `send_tool`: the run is given `message_send` if its agent
    has none (`give_send_tool`)."""

    store: MailboxStore
    deliver: bool
    name: str | None
    max_per_turn: int
    send_tool: bool

    def __init__(
        self,
        store: Bus | MailboxStore,
        deliver: bool = True,
        *,
        name: str | None = None,
        bucket: str = MAILBOX_BUCKET,
        max_per_turn: int = 10,
        send_tool: bool = False,
    ) -> None:
        mailbox = store if isinstance(store, MailboxStore) else MailboxStore(store, bucket)
        if name is not None:
            check_mail_name(name)
        if max_per_turn < 1:
            raise UsageError("max_per_turn must be at least 1")
        object.__setattr__(self, "store", mailbox)
        object.__setattr__(self, "deliver", bool(deliver))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "max_per_turn", max_per_turn)
        object.__setattr__(self, "send_tool", bool(send_tool))

    def to_data(self) -> dict[str, Any]:
        """The route as the run's recorded policy stores it (JSON-ready)."""
        return {
            "name": self.name,
            "deliver": self.deliver,
            "bucket": self.store.bucket,
            "max_per_turn": self.max_per_turn,
            "max_bytes": self.store.max_bytes,
            "max_pending": self.store.max_pending,
            "send_tool": self.send_tool,
        }

    @classmethod
    def from_data(cls, store: Bus, data: dict[str, Any]) -> MailboxRoute:
        """The route `to_data` recorded, on `store` (the run's)."""
        limits = {key: int(data[key]) for key in ("max_bytes", "max_pending") if key in data}
        mailbox = MailboxStore(store, str(data.get("bucket") or MAILBOX_BUCKET), **limits)
        name = data.get("name")
        return cls(
            mailbox,
            bool(data.get("deliver", True)),
            name=str(name) if name is not None else None,
            max_per_turn=int(data.get("max_per_turn", 10)),
            send_tool=bool(data.get("send_tool", False)),
        )

    @property
    def delivers(self) -> bool:
        return self.deliver

    def identity(self, state: RunState) -> MailIdentity:
        """The run's identity: the route's name (else the agent's), its thread, its id."""
        name = self.name if self.name is not None else state.agent_name
        try:
            check_mail_name(name)
        except UsageError as exc:
            raise UsageError(
                f"{exc} (give the route a name: MailboxRoute(..., name=...))"
            ) from None
        return MailIdentity(name=name, session=state.thread_id, run_id=state.run_id)

    def attach(self, state: RunState) -> RunMailbox:
        """The mailbox of the run whose state is `state` (one per run)."""
        return RunMailbox(self, state)


class RunMailbox:
    """One run's side of the mailbox: sending as the run, and delivery into its steps."""

    def __init__(self, route: MailboxRoute, state: RunState) -> None:
        self.route = route
        self._state = state
        #: Why the run has no identity (its agent's name is no mailbox name): raised at
        #: its first step, so the run ends with the error as its reason.
        self._problem: str | None = None
        try:
            self._identity: MailIdentity | None = route.identity(state)
        except UsageError as exc:
            self._identity, self._problem = None, str(exc)
        #: The head revision seen at the last claim (None: look).
        self._seen: int | None = None
        #: The step whose turn the mail was last looked at for.
        self._checked_step: int | None = None

    @property
    def identity(self) -> MailIdentity:
        """Who the run is in the mailbox (`UsageError` if its name cannot be one)."""
        if self._identity is None:
            raise UsageError(self._problem or "this run has no mailbox identity")
        return self._identity

    async def send(self, to: str, text: str, *, taint: Taint) -> MailMessage:
        """Send `text` to the agent `to`, as this run, stamped with `taint`."""
        if to == self.identity.name:
            raise UsageError(f"{to!r} is this agent's own name: a message to itself is refused")
        return await self.route.store.send(to, text, sender=self.identity, taint=taint)

    def mailer(self, registry: Registry, *, network: bool) -> RunMailer:
        """What the run's tool calls send through: this mailbox, stamping the step's
        taint (the conversation's, with the capabilities of the batch being run)."""
        state = self._state

        def turn_taint() -> Taint:
            able = [
                capabilities_of(registry.get(call.name), network=network)
                for call in state.unanswered_calls()
            ]
            return Interlock.batch_taint(state.taint_flags, able)

        return RunMailer(self, turn_taint)

    async def deliver(
        self,
        state: RunState,
        agui: AgUiContext[Any],
        durability: RunDurability | None = None,
    ) -> bool:
        """Fold the run's pending mail into the next user turn. Call it at the top of a
        turn, after steering, once the run is known to make another call. Returns True if
        it waited on the store (the caller then checks cancel and ceilings again before
        the model call); each step's turn is looked at once. `durability`: a durable
        run's; its lease is checked before each message is taken, and its `LeaseLost`
        is raised (the run was taken over: it must stop), never logged away."""
        if self._problem is not None:
            raise UsageError(self._problem)
        if not self.route.deliver or self._checked_step == state.step:
            return False
        self._checked_step = state.step
        delivered: list[MailMessage] = []
        fence: Callable[[], Awaitable[None]] | None = None
        if durability is not None:
            fence = functools.partial(durability.check_lease, state.run_id)

        def take(message: MailMessage) -> None:
            # Synchronously, as soon as it is claimed: taint first, then the text (law 6).
            state.add_taint(message.taint)
            framed = mail_frame(message)
            state.not_from_person.append(
                framed
            )  # never the user's words (law: mail is not the user)
            state.append_user_text(framed)
            if state.folded_mail is not None:
                state.folded_mail.append(message.id)
            delivered.append(message)

        try:
            claim = await self.route.store.claim(
                self.identity.name,
                run_id=state.run_id,
                session=state.thread_id,
                since=self._seen,
                limit=self.route.max_per_turn,
                on_claimed=take,
                folded=state.folded_mail,
                fence=fence,
            )
        except LeaseLost:
            raise
        except StoreError as exc:
            _logger.warning(
                "run %s: the mailbox of %s could not be read (%s); trying again next step",
                state.run_id,
                self.identity.name,
                exc,
            )
            self._seen = None
        else:
            self._seen = claim.revision
        for message in delivered:
            agui.emit(CustomEvent(DELIVERED_EVENT, _event_value(message)))
        return True


@dataclass(frozen=True, slots=True)
class RunMailer:
    """The sender a run's `message_send` calls get (`ExecContext.mailbox`): it stamps the
    run's identity and the step's taint; the tool passes only the recipient and text."""

    mailbox: RunMailbox
    taint: Callable[[], Taint]

    async def send(self, to: str, text: str) -> str:
        """Send; returns the message's id."""
        message = await self.mailbox.send(to, text, taint=self.taint())
        return message.id


def _event_value(message: MailMessage) -> dict[str, Any]:
    value: dict[str, Any] = {
        "id": message.id,
        "from": message.sender,
        "to": message.to,
        "taint": taint_names(message.taint),
        "text": message.text,
    }
    if message.sender_session is not None:
        value["fromSession"] = message.sender_session
    return value
