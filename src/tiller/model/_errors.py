"""Model errors, each saying whether trying again may help.

```
ModelError (TillerError)            retryable: bool
├── ModelHTTPError                  the provider answered with an error status
│   └── ContextOverflow             the prompt is longer than the model's context window
├── ModelTimeout                    no answer in time (retryable)
├── ModelConnectionError            the connection failed or dropped mid-stream (retryable)
└── ModelProtocolError              the provider sent something that is not its format
```
"""

from __future__ import annotations

from ..errors import TillerError

__all__ = [
    "ContextOverflow",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelProtocolError",
    "ModelTimeout",
]


class ModelError(TillerError):
    """A model call failed. `retryable` says whether the same call may succeed later;
    `retry_after` (seconds) is the provider's own advice, when it gave one."""

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        retry_after: float | None = None,
        provider: str | None = None,
    ) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable
        self.retry_after = retry_after
        self.provider = provider


class ModelHTTPError(ModelError):
    """The provider answered with an error status: 429 and 5xx are retryable, 4xx not."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        retry_after: float | None = None,
        provider: str | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(
            f"HTTP {status}: {message}",
            retryable=status == 429 or status >= 500,
            retry_after=retry_after,
            provider=provider,
        )
        self.status = status
        self.body = body


class ContextOverflow(ModelHTTPError):
    """The provider rejected the prompt as too long for the model's context window."""

    def __init__(self, message: str, *, provider: str | None = None, status: int = 400) -> None:
        super().__init__(status, message, provider=provider)
        self.retryable = False


class ModelTimeout(ModelError):
    """The provider did not answer in time (connecting or between chunks); retryable."""

    retryable = True


class ModelConnectionError(ModelError):
    """The connection failed, or dropped mid-stream."""

    retryable = True


class ModelProtocolError(ModelError):
    """The response does not follow the provider's format (a malformed chunk, say)."""
