"""Serve a tiller agent over AG-UI: `create_app(agent, AppSettings(store=..., token=...))`.

See `_app` for the endpoints; `tiller serve` runs it under uvicorn.
"""

from __future__ import annotations

from ._app import create_app
from ._input import InvalidRunInput
from ._runner import ServeSettings, ThreadBusy
from ._settings import AppSettings
from ._uvicorn import Server
from ._uvicorn import serve as run_server

__all__ = [
    "AppSettings",
    "InvalidRunInput",
    "ServeSettings",
    "Server",
    "ThreadBusy",
    "create_app",
    "run_server",
]
