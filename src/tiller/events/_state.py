"""Publishing a run's state to the client: a snapshot first, then deltas when they pay.

The rule is the `ag-ui` crate's `StateManager`: the first publish is a snapshot; an
unchanged state sends nothing; otherwise an RFC 6902 delta goes out only if its compact
encoding is strictly smaller than the snapshot's, else a snapshot. `reset()` makes the next
publish a snapshot (after a reconnect, or a snapshot sent by hand).

The cost of one publish is one `orjson` encoding of the new state plus work proportional
to the change. The manager keeps a *shadow* of the last published document (see
`_jsondiff`): a private copy the caller cannot reach, brought up to date by applying the
change rather than by copying the state again. An unchanged state is recognized by
comparing encodings. For a changed one, the new encoding is compared byte for byte with
the last one (C `memcmp`): the differing byte range, mapped through the encoded lengths of
the members on the way down (kept from publish to publish), names the members that
changed, and only those are diffed against the shadow (`_jsondiff.diff_encoded`). States
under `GUIDED_MIN_BYTES` are diffed against the shadow directly, with C-level `==` on
unchanged subtrees.

This module builds no events: `publish` and `patch` return a `StatePublish` and the run
context wraps it into `STATE_SNAPSHOT` or `STATE_DELTA`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import jsonpatch
import jsonpointer
import orjson
from pydantic import BaseModel, ValidationError

from ..errors import StatePatchError, UsageError
from . import _jsondiff

__all__ = ["StateManager", "StatePublish", "apply_to_live", "state_as_json"]

_T = TypeVar("_T")

GUIDED_MIN_BYTES = 4096
"""From this encoded size on, a changed state is diffed guided by its bytes (see
`_jsondiff.diff_encoded`); below it the whole-document C comparison is cheaper."""


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Final = _Unset()


@dataclass(frozen=True, slots=True)
class StatePublish:
    """What one publish sends: a full snapshot or an RFC 6902 delta.

    `snapshot` (for `kind="snapshot"`) and `delta` (for `kind="delta"`) are fresh JSON
    values decoded for this result alone: no one else holds them, neither the live state
    nor the manager, so the receiver may keep or change them. `encoded` is their compact
    JSON encoding, the bytes the size rule measured; an encoder can embed it with
    `orjson.Fragment(encoded)` instead of encoding the payload again.
    """

    kind: Literal["snapshot", "delta"]
    snapshot: Any
    delta: list[dict[str, Any]] | None
    encoded: bytes

    @classmethod
    def of_snapshot(cls, encoded: bytes) -> StatePublish:
        """A snapshot result from the document's compact encoding."""
        return cls("snapshot", orjson.loads(encoded), None, encoded)

    @classmethod
    def of_delta(cls, encoded: bytes) -> StatePublish:
        """A delta result from the operation list's compact encoding."""
        return cls("delta", None, orjson.loads(encoded), encoded)


def state_as_json(value: Any) -> Any:
    """The JSON form of a state: pydantic models by their aliases, as the client sees them.

    Aliases are used because the client's state and the run's input state are the same
    document: what `model_validate` reads back on the next run, the client must receive.
    """
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return value


def _encode(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise UsageError(
            f"the state cannot be encoded as JSON ({exc}); keep it to dicts with string "
            "keys, lists, strings, numbers (64-bit integers), bools and None, or use a "
            "pydantic model"
        ) from exc


class StateManager:
    """Decides, for each publish, between nothing, a snapshot and a delta.

    Ownership: the manager never keeps a reference to the state passed to `publish` or to
    the operations passed to `patch`, so the caller may go on mutating both in place; each
    publish compares against the manager's own copy, so in-place changes are seen. What it
    returns is owned by the receiver.

    Numbers are compared by value: replacing an int by a float of equal value (`1` by
    `1.0`) is not a change. Bools are never equal to numbers.
    """

    __slots__ = ("_encoded", "_index", "_published", "_shadow", "_snapshot_next")

    def __init__(self) -> None:
        self._shadow: Any = None
        # The compact encoding of the last published document, or None while it is stale
        # (after `patch`, until someone needs it). Object member order and int/float
        # spelling may differ from the shadow's; the JSON value is the same.
        self._encoded: bytes | None = None
        # The layout of `_encoded`, as far as publishes needed it (see `_jsondiff`).
        self._index: _jsondiff.Index | None = None
        self._published = False
        self._snapshot_next = True

    # ── publishing ───────────────────────────────────────────────────────────────

    def publish(self, value: Any) -> StatePublish | None:
        """Publish the state `value` (a pydantic model or plain JSON); None if unchanged.

        Costs one encoding of `value` plus work proportional to what changed since the
        last publish (or `patch`).
        """
        doc = state_as_json(value)
        encoded = _encode(doc)
        if not self._published:
            self._shadow = _jsondiff.shadow(doc)
            self._encoded = encoded
            self._index = None
            self._published = True
            self._snapshot_next = False
            return StatePublish.of_snapshot(encoded)
        if encoded == self._encoded:  # byte-equal: nothing to diff
            return self._snapshot_after_reset(encoded)
        found = None
        if self._encoded is not None and len(encoded) >= GUIDED_MIN_BYTES:
            found = _jsondiff.diff_encoded(self._shadow, doc, self._encoded, encoded, self._index)
        if found is None:
            ops, edits = _jsondiff.diff_shadow(self._shadow, doc)
            self._index = None
        else:
            ops, edits, self._index = found
        if not ops:  # member order, or int versus float of equal value
            self._encoded = encoded
            return self._snapshot_after_reset(encoded)
        # Encode now: the operations' values are the caller's live objects.
        delta = None if self._snapshot_next else orjson.dumps(ops)
        self._shadow = _jsondiff.apply_edits(self._shadow, edits)
        self._encoded = encoded
        if delta is None or len(delta) >= len(encoded):
            self._snapshot_next = False
            return StatePublish.of_snapshot(encoded)
        return StatePublish.of_delta(delta)

    def patch(
        self, ops: Iterable[Mapping[str, Any]], *, current: Any = _UNSET
    ) -> StatePublish | None:
        """Publish a change known as RFC 6902 operations, without diffing.

        The operations (any of the six) must apply to the last published document; they
        are applied to the manager's copy atomically and sent as the delta. Invalid or
        inapplicable operations raise `StatePatchError` and change nothing. An empty list
        publishes nothing (None), unless a snapshot is due after `reset()`.

        `current`, when given, is the live state after the change (as `apply_to_live`
        returned it). Before anything was published there is no document to patch, so
        `current` is published as the first snapshot; without it that is a `UsageError`.
        If the operations do not apply to the published document, the live state must
        have changed unpublished in between, and `current` is published by diff instead
        of raising.

        No size comparison is made (that would cost an encoding of the whole state); the
        result is a delta, or a snapshot when one is due after `reset()`.
        """
        if not self._published:
            if current is _UNSET:
                raise UsageError(
                    "patch() needs a published state to apply to: publish the state "
                    "first, or pass current=<the state after the change>"
                )
            return self.publish(current)
        try:
            encoded = orjson.dumps(ops if isinstance(ops, list) else list(ops))
        except (orjson.JSONEncodeError, TypeError) as exc:
            raise StatePatchError(
                f"the state patch is not a JSON list of operations: {exc}"
            ) from exc
        own_ops = orjson.loads(encoded)  # ours alone: the caller may reuse theirs
        if not own_ops and not self._snapshot_next:
            return None
        try:
            self._shadow = _jsondiff.apply(self._shadow, own_ops)
        except StatePatchError:
            if current is _UNSET:
                raise
            # The operations fit the live state but not what the client last saw (it was
            # changed in place and not published): fall back to a diff of the live state.
            return self.publish(current)
        self._encoded = None
        self._index = None
        if self._snapshot_next:
            self._snapshot_next = False
            self._encoded = _jsondiff.dumps_shadow(self._shadow)
            return StatePublish.of_snapshot(self._encoded)
        return StatePublish("delta", None, own_ops, encoded)

    def reset(self) -> None:
        """Make the next publish a snapshot, whatever changed (e.g. after a reconnect)."""
        self._snapshot_next = True

    # ── state events the manager did not make ────────────────────────────────────

    def adopt_snapshot(self, value: Any) -> None:
        """The client got `value` as a `STATE_SNAPSHOT` by another path (a transformer,
        an event sent by hand): it is the published document now, and the next publish
        is diffed against it. Costs one encoding of `value`."""
        self._published = False
        self.publish(value)

    def adopt_delta(self, ops: Iterable[Mapping[str, Any]]) -> None:
        """The client got `ops` as a `STATE_DELTA` by another path: apply them to the
        published document. If they do not apply to it (the client's base was not ours),
        the next publish is a snapshot, which puts the client right whatever it has."""
        if not self._published:
            return  # nothing published yet: the first publish is a snapshot anyway
        try:
            own_ops = orjson.loads(orjson.dumps(ops if isinstance(ops, list) else list(ops)))
            self._shadow = _jsondiff.apply(self._shadow, own_ops)
        except (StatePatchError, orjson.JSONEncodeError, TypeError):
            self._snapshot_next = True
            return
        self._encoded = None
        self._index = None

    def _snapshot_after_reset(self, encoded: bytes) -> StatePublish | None:
        if not self._snapshot_next:
            return None
        self._snapshot_next = False
        return StatePublish.of_snapshot(encoded)

    # ── the last published document ──────────────────────────────────────────────

    @property
    def has_published(self) -> bool:
        """Whether anything was published yet (`reset()` does not forget it)."""
        return self._published

    @property
    def published_json(self) -> bytes | None:
        """The compact JSON of the last published document, or None before the first.

        Free after `publish`; after `patch` it costs one encoding, then it is cached.
        """
        if not self._published:
            return None
        if self._encoded is None:
            self._encoded = _jsondiff.dumps_shadow(self._shadow)
        return self._encoded

    @property
    def published(self) -> Any:
        """A fresh copy of the last published document, owned by the caller.

        Raises `UsageError` before the first publish, as there is no document yet.
        """
        encoded = self.published_json
        if encoded is None:
            raise UsageError("no state was published yet; publish() it first")
        return orjson.loads(encoded)


# ── applying operations to the live state ─────────────────────────────────────────


def _apply_plain(doc: Any, ops: Iterable[Mapping[str, Any]]) -> Any:
    try:
        return jsonpatch.apply_patch(doc, ops, in_place=True, atomic=True)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise StatePatchError(f"the state patch does not apply: {exc}") from exc


def apply_to_live(value: _T, ops: Iterable[Mapping[str, Any]]) -> _T:
    """Apply RFC 6902 operations to a live state; returns the state to use from now on.

    A dict or list is changed in place and returned, unless an operation replaces the
    whole document (path `""`), in which case the new value is returned. A pydantic model
    is never changed: its JSON form (by alias) is patched and validated into a new
    instance of the same class. Inserted values are copies, so the state never shares
    objects with `ops`.

    On failure raises `StatePatchError` and `value` is left exactly as it was.
    """
    if isinstance(value, BaseModel):
        doc = _apply_plain(value.model_dump(mode="json", by_alias=True), ops)
        try:
            return value.model_validate_json(orjson.dumps(doc))
        except (ValidationError, orjson.JSONEncodeError) as exc:
            raise StatePatchError(
                f"the patched state does not fit {type(value).__name__}: {exc}"
            ) from exc
    result: _T = _apply_plain(value, ops)
    return result
