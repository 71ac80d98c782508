"""OpenTelemetry GenAI traces and metrics for tiller runs (issue 20).

Spans and attributes follow the GenAI semantic conventions of
`opentelemetry-semantic-conventions` 0.66b2 (`tiller.telemetry.SEMCONV_VERSION`):
`invoke_agent` for a run (a subagent's nested under its parent's `execute_tool`), `chat`
for each model call, `execute_tool` for each tool call, and tiller's own facts as
`tiller.*` attributes. Metrics: `gen_ai.client.token.usage`,
`gen_ai.client.operation.duration`, `tiller.tool.duration`, `tiller.runs` (by stop cause).

Only `opentelemetry-api` is needed: a run is traced when its options carry a `Telemetry`
(`RunOptions().with_telemetry(Telemetry(tracer_provider, meter_provider))`); without one
the loop does nothing at all. Nothing is sent anywhere but where the given providers
export. `configure_otlp()` sets up the SDK's OTLP/HTTP exporters from the standard
`OTEL_*` variables (the `tiller[otel]` extra), for `tiller run/serve/worker --otel`.
"""

from __future__ import annotations

from ._names import SEMCONV_VERSION
from ._run_trace import ChatSpan, RunTrace, context_of, traceparent_of
from ._setup import OtelMissing, configure_otlp
from ._telemetry import Telemetry

__all__ = [
    "SEMCONV_VERSION",
    "ChatSpan",
    "OtelMissing",
    "RunTrace",
    "Telemetry",
    "configure_otlp",
    "context_of",
    "traceparent_of",
]
