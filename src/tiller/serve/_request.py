"""What a served request says besides its conversation, read once for both of the
server's paths (a run in this process, or a job for a fleet `tiller serve --fleet`
submits): its ids, checked; its messages and context as wire dicts; whether its run
outlives the client (`forwardedProps.tiller.detach`); the client's state.
"""

from __future__ import annotations

import re
from typing import Any

from ag_ui.core import RunAgentInput

from ..events import RUNTIME_STATE_KEY
from ._input import InvalidRunInput

__all__ = ["check_ids", "client_state", "detach_of", "wire_context", "wire_messages"]

#: Thread and run ids come from clients and become store keys: no '/' (it separates a
#: run's own records), nothing a log line or a URL would mangle.
_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}")
#: Ids that would collide with the checkpoint bucket's own keys (`thread/...`).
_RESERVED_IDS = frozenset({"thread"})


def check_ids(input: RunAgentInput) -> None:
    """`InvalidRunInput` (a 400) if the thread or run id cannot be a store key."""
    for name, value in (("threadId", input.thread_id), ("runId", input.run_id)):
        if not _ID.fullmatch(value) or value in _RESERVED_IDS:
            raise InvalidRunInput(
                f"{name} {value!r} must be 1 to 200 letters, digits, '.', '_', ':' or "
                "'-' (and not 'thread')"
            )


def wire_messages(input: RunAgentInput) -> list[dict[str, Any]]:
    return [m.model_dump(by_alias=True, exclude_none=True) for m in input.messages]


def wire_context(input: RunAgentInput) -> list[dict[str, Any]]:
    return [c.model_dump(by_alias=True, exclude_none=True) for c in input.context or ()]


def detach_of(input: RunAgentInput, default: bool) -> bool:
    """`forwardedProps.tiller.detach`, when it is a boolean; else the server's default."""
    props = input.forwarded_props if isinstance(input.forwarded_props, dict) else {}
    tiller_props = props.get("tiller")
    if isinstance(tiller_props, dict) and isinstance(tiller_props.get("detach"), bool):
        return bool(tiller_props["detach"])
    return default


def client_state(raw: Any) -> Any:
    """The client's state without the runtime's own section (the run publishes it); an
    empty state is no state (the agent's typed state then starts from its defaults)."""
    if isinstance(raw, dict):
        own = {key: value for key, value in raw.items() if key != RUNTIME_STATE_KEY}
        return own or None
    return raw
