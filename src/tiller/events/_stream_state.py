"""The state a run's stream describes, as its client rebuilds it: the last
`STATE_SNAPSHOT` with every `STATE_DELTA` since applied (RFC 6902, with `jsonpatch`).

The verifier holds one, so a raw delta that is not an RFC 6902 document, or that does not
apply to what the client has, is refused before it goes out (ag-ui-validate AGUI303 and
AGUI302), whoever built it: the agent by hand, a transformer, or a buggy diff.

Cheap where it can be: a snapshot is kept by reference (the event owns its value), and
copied only when the first delta after it must be applied. A delta the run's own state
manager made (`trust`) is valid by construction: it is not applied here at all; the
document is fetched from the manager only if a delta from elsewhere must be judged after
it. So a run that publishes through its context pays nothing here per delta, and a hand
sent delta costs work proportional to the change (plus one copy after trusted ones).
A delta before any snapshot applies to the state the client sent with the run; the run
context seeds it (`seed`). Without a seed (a bare verifier), such a delta is judged on its
shape only, as the validator does, since the stream does not show its base.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import jsonpatch
import jsonpointer

from ..errors import ProtocolViolation
from ._types import jsonable

__all__ = ["StreamState"]

_OPS: Final = frozenset({"add", "remove", "replace", "move", "copy", "test"})
_NEEDS_VALUE: Final = frozenset({"add", "replace", "test"})
_NEEDS_FROM: Final = frozenset({"move", "copy"})


def _pointer_ok(pointer: object) -> bool:
    return isinstance(pointer, str) and (pointer == "" or pointer.startswith("/"))


def shape_problem(delta: object) -> str | None:
    """Why `delta` is not an RFC 6902 document (the validator's AGUI303), or None."""
    if not isinstance(delta, Sequence) or isinstance(delta, str | bytes):
        return "a STATE_DELTA's delta must be a list of RFC 6902 operations"
    for index, op in enumerate(delta):
        if not isinstance(op, Mapping):
            return f"operation {index} is not an object"
        kind = op.get("op")
        if not isinstance(kind, str) or kind not in _OPS:
            return f"operation {index} has op {kind!r}; RFC 6902 knows {', '.join(sorted(_OPS))}"
        if not _pointer_ok(op.get("path")):
            return f"operation {index} ({kind}) needs a JSON pointer path ('' or '/...')"
        if kind in _NEEDS_VALUE and "value" not in op:
            return f"operation {index} ({kind}) is missing its value"
        if kind in _NEEDS_FROM and not _pointer_ok(op.get("from")):
            return f"operation {index} ({kind}) needs a JSON pointer 'from'"
    return None


class StreamState:
    """The client's view of the state, and the check of each state event against it."""

    __slots__ = ("_blind", "_doc", "_known", "_owned", "_pending_source", "_source", "_trusted")

    def __init__(self) -> None:
        self._known = False  # a snapshot went out in this run
        self._doc: Any = None
        self._owned = False  # `_doc` is our copy (else the last snapshot's own value)
        # Where the document is while `_doc` is stale (after trusted deltas): a function
        # returning a fresh copy of it.
        self._source: Callable[[], Any] | None = None
        self._trusted: object = None  # the operations `trust` vouched for, if any
        self._pending_source: Callable[[], Any] | None = None
        self._blind = False  # the manager lost track of the client's document

    @property
    def known(self) -> bool:
        return self._known

    @property
    def document(self) -> Any:
        """A copy of the state the client has now (None before any snapshot)."""
        self._refresh()
        return jsonable(self._doc)

    def trust(self, event: object, source: Callable[[], Any]) -> None:
        """`event` (a `STATE_DELTA` about to be emitted) was made by a state manager whose
        document is the client's: if it arrives with its operations unchanged (a
        transformer may copy it to strip attribution) it is not checked, and the document
        after it is `source()`, fetched only when needed."""
        self._trusted = getattr(event, "delta", None)
        self._pending_source = source

    def blind(self) -> None:
        """The manager's document is no longer the client's (a state event it made was
        dropped or refused): until the next snapshot, which it sends next, no delta from
        elsewhere can be judged, so none is let out."""
        self._blind = True
        self._source = None

    def _refresh(self) -> None:
        if self._source is not None:
            self._doc, self._source = self._source(), None
            self._owned = True

    def seed(self, value: Any) -> None:
        """The client's state before any snapshot: the one it sent with the run."""
        self._doc = value
        self._owned = False
        self._known = True
        self._source = None

    def snapshot(self, event: Any) -> Callable[[], None]:
        def commit() -> None:
            self._doc = event.snapshot
            self._owned = False
            self._known = True
            self._source = None
            self._blind = False

        return commit

    def delta(self, event: Any) -> Callable[[], None] | None:
        if event.delta is self._trusted and self._known:
            source = self._pending_source

            def trusted() -> None:
                self._source, self._doc = source, None

            return trusted
        ops = jsonable(event.delta)  # the wire form: pydantic values dumped, tuples listed
        problem = shape_problem(ops)
        if problem is not None:
            raise ProtocolViolation("DeltaNotRfc6902", problem)
        if self._blind:
            raise ProtocolViolation(
                "DeltaDoesNotApply",
                "a state event the run made did not reach the client, so the state it has "
                "is not known until the next snapshot; call publish_state() first",
            )
        if not self._known:
            return None
        for index, op in enumerate(ops):
            # jsonpatch lets moving the whole document onto itself pass as a no-op; RFC
            # 6902 (and the validator) remove the source first, and the root cannot go.
            if op["op"] == "move" and op["from"] == "":
                raise ProtocolViolation(
                    "DeltaDoesNotApply", f"operation {index} moves the whole document"
                )
        self._refresh()
        if not self._owned:
            self._doc = jsonable(self._doc)
            self._owned = True
        try:
            # Atomic: a delta that fails halfway leaves the document as it was.
            result = jsonpatch.apply_patch(self._doc, ops, in_place=True, atomic=True)
        except (
            jsonpatch.JsonPatchException,
            jsonpointer.JsonPointerException,
            TypeError,
            KeyError,
            IndexError,
        ) as exc:
            raise ProtocolViolation(
                "DeltaDoesNotApply",
                f"the STATE_DELTA does not apply to the state the client has ({exc}); "
                "publish state through the run context, or send a STATE_SNAPSHOT first",
            ) from exc

        def commit() -> None:
            self._doc = result

        return commit
