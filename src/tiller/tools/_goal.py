"""`UserGoal`: what the person asked for, under byte budgets, for judging an action.

The auto classifier (`tiller.policy.AutoClassifier`) asks the run's model whether a
proposed action fits the user's goal. It needs the requests, not the whole conversation:
the latest summary (after a compaction), the user's messages since, and the agent's reply
just before the latest one (what "yes, go ahead" refers to). Budgets keep that prompt
small and bounded whatever the history: 6000 bytes of summary, 2000 per request and 8000
in all (the first and the latest are always kept, the most recent others fill the rest),
2000 of the prior reply.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

from ..conversation import AssistantMessage, Message, UserMessage

__all__ = ["UserGoal", "person_text"]

SUMMARY_BYTES: Final = 6000
REQUEST_BYTES: Final = 2000
REQUESTS_TOTAL_BYTES: Final = 8000
PRIOR_REPLY_BYTES: Final = 2000


def person_text(text: str, not_from_person: Collection[str]) -> str:
    """`text` without the parts the runtime folded in (each removed where it occurs)."""
    for folded in not_from_person:
        if folded and folded in text:
            text = text.replace(folded, "")
    return text.strip()


def _head(text: str, limit: int) -> str:
    """The first `limit` bytes of `text`, cut on a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore") + "…"


def _tail(text: str, limit: int) -> str:
    """The last `limit` bytes of `text`, cut on a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return "…" + data[-limit:].decode("utf-8", errors="ignore")


@dataclass(frozen=True, slots=True)
class UserGoal:
    """The user's requests, bounded.

    - `summary`: the latest compaction summary (first 6000 bytes), or "".
    - `requests`: the user's messages since, oldest first, each at most 2000 bytes.
    - `omitted`: how many requests were left out to stay within 8000 bytes.
    - `prior_reply`: the end (2000 bytes) of the agent's reply before the latest request.
    """

    summary: str = ""
    requests: tuple[str, ...] = ()
    omitted: int = 0
    prior_reply: str = ""

    @classmethod
    def from_messages(
        cls,
        messages: Sequence[Message],
        *,
        summary: str = "",
        not_from_person: Collection[str] = (),
    ) -> UserGoal:
        """The goal expressed by `messages` (a run's transcript).

        Only text a person typed counts: tool results ride in user messages too, but they
        are data, not requests; so are the texts in `not_from_person` (another agent's
        mail, a summary), which the runtime folded into user turns.
        """
        texts: list[tuple[int, str]] = []
        for index, message in enumerate(messages):
            if isinstance(message, UserMessage):
                text = person_text(message.text, not_from_person)
                if text:
                    texts.append((index, text))
        prior = ""
        if texts:
            latest_index = texts[-1][0]
            for message in reversed(messages[:latest_index]):
                if isinstance(message, AssistantMessage) and message.text.strip():
                    prior = _tail(message.text, PRIOR_REPLY_BYTES)
                    break
        clipped = [_head(text, REQUEST_BYTES) for _, text in texts]
        kept, omitted = _fit(clipped)
        return cls(
            summary=_head(summary, SUMMARY_BYTES),
            requests=tuple(kept),
            omitted=omitted,
            prior_reply=prior,
        )

    def render(self) -> str:
        """The goal as plain text for a prompt."""
        parts: list[str] = []
        if self.summary:
            parts.append(f"Summary of earlier work:\n{self.summary}")
        if self.requests:
            lines = [f"{n}. {text}" for n, text in enumerate(self.requests, start=1)]
            if self.omitted:
                lines.insert(1, f"({self.omitted} earlier requests omitted)")
            parts.append("The user's requests, oldest first:\n" + "\n".join(lines))
        if self.prior_reply:
            parts.append(f"The agent's reply before the latest request:\n{self.prior_reply}")
        return "\n\n".join(parts) if parts else "(no request from the user yet)"


def _fit(requests: list[str]) -> tuple[list[str], int]:
    """Keep the first and the latest request, then the most recent others that fit."""
    if len(requests) <= 2:
        return requests, 0
    size = [len(text.encode("utf-8")) for text in requests]
    used = size[0] + size[-1]
    keep = {0, len(requests) - 1}
    for index in range(len(requests) - 2, 0, -1):
        if used + size[index] > REQUESTS_TOTAL_BYTES:
            break
        used += size[index]
        keep.add(index)
    kept = [text for index, text in enumerate(requests) if index in keep]
    return kept, len(requests) - len(kept)
