"""`--otel` for `tiller run`, `tiller serve` and `tiller worker`: the OpenTelemetry SDK
with OTLP/HTTP exporters, configured from the standard `OTEL_*` environment variables
(`tiller.telemetry.configure_otlp`). Without the SDK installed the command says, in one
line, `pip install 'tiller[otel]'`, and exits 2; so it does when `OTEL_*` asks for an
export it cannot make (another exporter or protocol)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from ..telemetry import Telemetry

__all__ = ["OTEL_HELP", "otel_or_exit"]

OTEL_HELP = (
    "Send OpenTelemetry GenAI traces and metrics over OTLP/HTTP, configured by the "
    "standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, ...); needs tiller[otel]."
)


@contextlib.contextmanager
def otel_or_exit(enabled: bool, command: str) -> Iterator[Telemetry | None]:
    """The telemetry `--otel` configures (None without it), flushed when the block
    ends; exit 2 with the install line when the SDK is missing."""
    if not enabled:
        yield None
        return
    from ..errors import UsageError
    from ..telemetry import configure_otlp

    try:
        setup = configure_otlp()
    except UsageError as exc:  # no SDK (OtelMissing), or OTEL_* asking what it cannot do
        typer.echo(f"{command}: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        yield setup.telemetry
    finally:
        setup.shutdown()
