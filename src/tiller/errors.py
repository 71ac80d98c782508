"""Every error tiller raises on purpose, under one root.

```
TillerError
├── UsageError                 a developer used the API wrongly; the message says how to fix it
│   ├── HandleClosed           an emitter handle was used after it was closed
│   └── StatePatchError        RFC 6902 state operations are invalid or do not apply
├── Cancelled                  raised inside a run once its cancellation token fired
├── ProtocolViolation          an event would break the AG-UI stream (carries the rule's name)
├── StateDecodeError           the run's input state does not fit the agent's state type
├── InvalidResume              a resume does not answer the run's open interrupts correctly
├── InvalidToolArguments       a tool call's arguments do not fit the tool's parameters
├── SubscriberLagged           a subscriber fell too far behind and was detached
└── NewerSchemaError           a stored record was written by a newer tiller (upgrade to read it)
```

Signals that a tool raises on purpose (retry with feedback, needs approval) are not
`TillerError`s, so `except TillerError` never swallows them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

__all__ = [
    "Cancelled",
    "HandleClosed",
    "InvalidResume",
    "InvalidToolArguments",
    "NewerSchemaError",
    "ProtocolViolation",
    "StateDecodeError",
    "StatePatchError",
    "SubscriberLagged",
    "TillerError",
    "UsageError",
]


class TillerError(Exception):
    """The root of every error tiller raises on purpose."""


class UsageError(TillerError):
    """The API was used in a way it does not support; the message says what to do instead."""


class HandleClosed(UsageError):
    """An emitter handle (message, reasoning block, tool call, step, subagent) was used
    after it was closed. Open a new handle instead."""


class StatePatchError(UsageError):
    """RFC 6902 operations given to `patch_state` are malformed or do not apply to the
    state (a missing path, a failed `test`, a result the state type rejects).

    Nothing was changed or published. Fix the operations, or change the state and call
    `publish_state()` to let tiller work out the delta.
    """


class Cancelled(TillerError):
    """The run's cancellation token fired.

    Raised by an emit or an explicit check inside a run after cancellation. The run's
    edge (the driver, `agent.run()`) turns it into a cancelled outcome; it never means
    the work failed.
    """

    def __init__(self, message: str = "the run was cancelled") -> None:
        super().__init__(message)


class ProtocolViolation(TillerError):
    """An event was refused because it would make the AG-UI stream invalid.

    `rule` names the broken rule (for example `NotOpen` or `OpenAtFinish`), so a test or a
    log can tell which guarantee the emitting code got wrong.
    """

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.detail = message


class StateDecodeError(TillerError):
    """The state sent with a run does not decode into the agent's state type.

    The driver reports it as `RUN_ERROR{code: "SERIALIZATION"}`; fix the client's state or
    widen the agent's state model.
    """


class InvalidResume(TillerError):
    """A resume does not fit the run's open interrupts: it misses one, names an unknown
    one, or answers one twice. Send one resume entry for every open interrupt."""


class SubscriberLagged(TillerError):
    """The subscriber's buffer filled up, so it was detached; the run went on without it.

    Read faster, give the subscription a larger buffer, or reattach from the event log.
    """


class InvalidToolArguments(TillerError):
    """A tool call's arguments do not validate against the tool's parameters.

    The message is written to be handed back to the model so it can correct the call.
    """

    def __init__(self, tool_name: str, detail: str) -> None:
        super().__init__(f"invalid arguments for tool {tool_name!r}: {detail}")
        self.tool_name = tool_name
        self.detail = detail


class NewerSchemaError(TillerError):
    """A stored record (a run state, a checkpoint, a held approval...) has a schema version
    newer than this tiller knows: a newer tiller wrote it. Reading on could misread it, so
    it is refused; the message names the writer (its `written_by`) and says to upgrade.

    The store's and the state's own errors for such a record derive from this class too
    (`RecordFromNewerTiller` is a `MalformedRecord` as well), so existing handlers still
    catch them, and `except NewerSchemaError` catches them all."""


# For tiller's own packages (not API; not in __all__).


def first_leaf(exc: BaseException) -> BaseException:
    """The exception that matters in what a task group raised: the first leaf of its
    (nested) groups that is not a cancellation — the tasks the failure cut short raise
    `CancelledError`, which says nothing. `exc` itself when it is not a group."""
    leaves = list(leaves_of(exc))
    for leaf in leaves:
        if not isinstance(leaf, asyncio.CancelledError):
            return leaf
    return leaves[0] if leaves else exc


def leaves_of(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions in `exc`'s (nested) groups, in order; `exc` when it is not a group."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves_of(inner)
    else:
        yield exc
