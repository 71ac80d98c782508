"""`AppSettings`: how `create_app` serves its agent, as one value.

`create_app(agent, AppSettings(store="sqlite:///runs.db", token="..."))`. The old form,
`create_app(agent, store=..., token=..., ...)` with the same names as keywords, works for
one release and warns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from ..errors import UsageError
from ..events import TransformerFactory, check_transformer_factory
from ..loop import RunContext, RunOptions
from ..pinned_policy import PinnedPolicy
from ..store import Bus, check_mail_name

__all__ = ["DEFAULT_MAX_BODY", "AppSettings"]

#: The largest request body accepted (bytes): a long thread with attachments fits.
DEFAULT_MAX_BODY = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class AppSettings:
    """What a served agent runs with. Checked when made: a mistake is refused before
    any server starts."""

    #: A store URL (opened with the app, closed with it) or an open `Bus`.
    store: str | Bus
    #: The bearer token every API call must carry (None: no auth, loopback `Host` names
    #: only).
    token: str | None
    #: Every run's jail.
    workspace: str | Path = "."
    #: Keeps the users of one store apart (with a store URL).
    namespace: str = ""
    #: Origins a page may call the API from (CORS).
    cors_origins: Sequence[str] = ()
    #: Runs keep going when their client disconnects.
    detach: bool = False
    #: Seconds between keep-alive frames on an idle stream.
    keep_alive: float = 15.0
    max_body: int = DEFAULT_MAX_BODY
    #: How long an interrupt stays answerable, in seconds (None: until answered).
    interrupt_ttl: float | None = None
    options: RunOptions | None = None
    #: Adjusts each run's context (a budget, hooks, a classifier) after the defaults.
    configure: Callable[[RunContext], RunContext] | None = None
    #: What new runs start with (None: the workspace's `tiller.toml`, read once when the
    #: app is made); never re-read per request, its MCP servers started with the app.
    policy: PinnedPolicy | None = None
    #: Builds each run's stream transformers (`lambda: [FilterToolCalls.deny(["x"])]`):
    #: a factory, so two requests never share one's state.
    transformers: TransformerFactory | None = None
    #: Submit each request's run to the fleet on this run queue (`tiller serve --fleet`)
    #: instead of running it here; None: runs run in this process.
    fleet_queue: str | None = None
    #: The agent the fleet's workers load, `"module:attr"` (needed with `fleet_queue`).
    fleet_agent: str | None = None
    #: The model string a fleet worker calls the agent's factory with.
    fleet_model: str | None = None
    #: JavaScript modules the web console imports when it starts, in order: an app's own
    #: tool renderers (`window.tillerConsole.registerToolRenderer`, see the README).
    console_scripts: Sequence[str | Path] = ()
    #: Attach the store's mailbox to every run under this agent name (`tiller serve
    #: --mailbox NAME`): each receives what is sent to NAME at its steps. None: no mailbox
    #: (or the one `configure` attaches).
    mailbox: str | None = None

    def __post_init__(self) -> None:
        if self.token is not None and not self.token.strip():
            raise UsageError("the bearer token is empty; pass a real token, or None for no auth")
        if self.interrupt_ttl is not None and not self.interrupt_ttl > 0:
            raise UsageError(f"interrupt_ttl must be positive seconds, not {self.interrupt_ttl!r}")
        check_transformer_factory(self.transformers)
        for script in self.console_scripts:
            path = Path(script)
            if path.suffix not in (".js", ".mjs") or not path.is_file():
                raise UsageError(
                    f"console script {str(script)!r} is not a JavaScript file (.js or .mjs) "
                    "that exists; pass the path of the module the console should import"
                )
        if self.mailbox is not None:
            check_mail_name(self.mailbox)
        if self.fleet_queue is not None and not self.fleet_agent:
            raise UsageError(
                "a fleet server needs the agent its workers load: fleet_agent='module:attr' "
                "(tiller serve MODULE:AGENT --fleet)"
            )


class LegacyAppArgs(TypedDict, total=False):
    """`create_app`'s keyword arguments before `AppSettings` (deprecated)."""

    store: str | Bus
    token: str | None
    workspace: str | Path
    namespace: str
    cors_origins: Sequence[str]
    detach: bool
    keep_alive: float
    max_body: int
    interrupt_ttl: float | None
    options: RunOptions | None
    configure: Callable[[RunContext], RunContext] | None
    policy: PinnedPolicy | None
    transformers: TransformerFactory | None
    console_scripts: Sequence[str | Path]
