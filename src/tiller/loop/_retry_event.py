"""`tiller.model_retry`: a model call that failed before streaming and will be tried again.

The model layer retries quietly (`tiller.model.stream_with_retry`); a person watching a run
would see only a pause, or a run that seems stuck while a provider answers 500 after 500.
So each retry becomes a `CUSTOM` event on the run's stream, before the wait: the terminal
view prints it ("retrying in 2 s: HTTP 500 …"), a web client can show it, the event log
keeps it. The value: `attempt` (the one that failed, 1-based), `maxAttempts`,
`delaySeconds`, `error` (its message), `provider` and `model`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..events import CustomEvent

if TYPE_CHECKING:
    from ..events import AgUiContext
    from ..model import Model, RetryNotice

__all__ = ["MODEL_RETRY_EVENT", "retry_reporter"]

#: The `CUSTOM` event each retry of a model call emits.
MODEL_RETRY_EVENT: Final = "tiller.model_retry"


def retry_reporter(agui: AgUiContext[Any], model: Model) -> Callable[[RetryNotice], None]:
    """`stream_with_retry`'s `on_retry` for one model call of a run: emit the notice."""

    def report(notice: RetryNotice) -> None:
        agui.emit(
            CustomEvent(
                MODEL_RETRY_EVENT,
                {
                    "attempt": notice.attempt,
                    "maxAttempts": notice.max_attempts,
                    "delaySeconds": round(notice.delay, 3),
                    "error": str(notice.error),
                    "provider": model.provider,
                    "model": model.name,
                },
            )
        )

    return report
