"""Serve a tiller agent over AG-UI: `create_app(agent, store=..., token=...)`.

See `_app` for the endpoints; `tiller serve` runs it under uvicorn.
"""

from __future__ import annotations

from ._app import DEFAULT_MAX_BODY, create_app
from ._input import InvalidRunInput, conversation_from_agui
from ._runner import Runner, ServeSettings, ThreadBusy
from ._uvicorn import Server
from ._uvicorn import serve as run_server

__all__ = [
    "DEFAULT_MAX_BODY",
    "InvalidRunInput",
    "Runner",
    "ServeSettings",
    "Server",
    "ThreadBusy",
    "conversation_from_agui",
    "create_app",
    "run_server",
]
