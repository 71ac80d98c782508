"""The tool call ids a provider sees: its own where they are usable, the runtime's elsewhere.

The transcript names every call by the runtime's id (`{run_id}-call-{n}`, law 10) and keeps
the provider's beside it (`ToolCall.provider_id`). A provider must get a legal history
back: every call id unique in the request, every result naming its call, and each id in
the alphabet that provider accepts. So a call goes out under the provider's own id when it
is non-empty, unique in the request and acceptable as it is (the provider may tie its
reasoning or caching to it), and under the runtime's id otherwise (sanitized for the
provider, made unique if sanitizing collided). Results are mapped through the same table,
since they pair with calls by runtime id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from ..conversation import AssistantMessage, UserMessage

__all__ = ["WireIds"]


class WireIds:
    """Runtime call id → the id to send, for one request's messages.

    `sanitize` turns any id into one the provider accepts (identity when it accepts
    anything); an id it would change is not sent as the provider's own.
    """

    __slots__ = ("_by_runtime", "_sanitize")

    def __init__(
        self,
        messages: Sequence[UserMessage | AssistantMessage],
        sanitize: Callable[[str], str] | None = None,
    ) -> None:
        self._sanitize = sanitize or (lambda value: value)
        calls = [
            call
            for message in messages
            if isinstance(message, AssistantMessage)
            for call in message.tool_calls
        ]
        seen = Counter(call.provider_id for call in calls if call.provider_id)
        self._by_runtime: dict[str, str] = {}
        used: set[str] = set()
        # First the provider's own ids that can go back as they are, so a runtime id
        # never takes one of them.
        for call in calls:
            own = call.provider_id
            if own and seen[own] == 1 and self._sanitize(own) == own and own not in used:
                self._by_runtime[call.id] = own
                used.add(own)
        for call in calls:
            if call.id in self._by_runtime:
                continue
            wire = base = self._sanitize(call.id) or "call"
            n = 1
            while wire in used:
                n += 1
                wire = f"{base}-{n}"
            self._by_runtime[call.id] = wire
            used.add(wire)

    def __getitem__(self, runtime_id: str) -> str:
        """The id to send for `runtime_id` (a result's call, or a call itself)."""
        found = self._by_runtime.get(runtime_id)
        return found if found is not None else self._sanitize(runtime_id)
