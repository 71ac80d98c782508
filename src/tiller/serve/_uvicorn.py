"""`Server`: uvicorn, taught to stop tiller's runs before it waits for its connections.

uvicorn shuts down by waiting for open responses to end, then telling the app. A served
run's stream ends only when the run does, so a shutdown would wait for every run (or,
for a client following a run of another process, forever). This server tells the app's
runner first: its runs stop, left recoverable by another process, and its followers end;
then uvicorn's own shutdown finds the streams closing.
"""

from __future__ import annotations

import socket
from typing import Any

import uvicorn

__all__ = ["Server", "serve"]


class Server(uvicorn.Server):
    """A uvicorn server for an app made by `create_app`."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state = getattr(getattr(self.config.app, "state", None), "tiller", None)
        runner = getattr(state, "live_runner", None)
        if runner is not None:
            runner.begin_shutdown()
        await super().shutdown(sockets)


def serve(app: Any, *, host: str, port: int, log_level: str = "warning") -> None:
    """Run `app` until interrupted (Ctrl+C, SIGTERM), then shut down as `Server` does."""
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=10
    )
    Server(config).run()
