"""`Telemetry`: where a run's spans and metrics go, given explicitly (law 9).

A `Telemetry` holds a tracer provider and a meter provider, and whether message content
is recorded. It is a value: `RunOptions().with_telemetry(telemetry)` hands it to a run,
`with_parent(traceparent)` says which span (a served request's, a fleet job's) the run
goes under. Nothing reads a global provider except `Telemetry.from_global()`, which the
CLI calls once after `--otel` configured the SDK.

With no `Telemetry` on the run's options (the default) the loop skips every hook: no
span, no attribute, no clock read. With one whose providers are the API's no-op ones,
the spans are the API's non-recording spans.

Content (prompts, completions, tool arguments and results, and the text of errors, which
may quote any of them) is recorded only with `record_content=True`, and then through
`redact`, the same `(record) -> record` a
capture takes (`tiller.capture.Redactor`): a redactor that fails drops the content.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..capture import Redactor
from . import _names as n

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider
    from opentelemetry.trace import Tracer, TracerProvider

__all__ = ["Telemetry"]

#: The semantic-conventions schema the names follow (semconv 0.66b2's newest).
_SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"

#: Bucket bounds the GenAI conventions advise for the two client histograms.
_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
    67108864,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Instruments:
    tracer: Tracer
    meter: Meter
    token_usage: Histogram
    operation_duration: Histogram
    tool_duration: Histogram
    runs: Counter


@dataclass(frozen=True, slots=True)
class Telemetry:
    """Where runs' spans and metrics go (see the module docstring).

    - `tracer_provider`, `meter_provider`: OpenTelemetry providers (SDK or API no-op).
    - `record_content`: record prompts, completions, tool arguments and results (off).
    - `redact`: applied to content before it is recorded, as for captures.
    - `parent`: a W3C `traceparent` the run's span goes under (None: the current span
      of the caller's OpenTelemetry context, if any). A resumed run goes under the span
      its checkpoint names instead, and links to this one.
    """

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    record_content: bool = False
    redact: Redactor | None = None
    parent: str | None = None
    _instruments: _Instruments = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from .. import __version__

        tracer = self.tracer_provider.get_tracer("tiller", __version__, schema_url=_SCHEMA_URL)
        meter = self.meter_provider.get_meter("tiller", __version__, schema_url=_SCHEMA_URL)
        instruments = _Instruments(
            tracer=tracer,
            meter=meter,
            token_usage=meter.create_histogram(
                n.TOKEN_USAGE,
                unit="{token}",
                description="Number of input and output tokens used.",
                explicit_bucket_boundaries_advisory=list(_TOKEN_BUCKETS),
            ),
            operation_duration=meter.create_histogram(
                n.OPERATION_DURATION,
                unit="s",
                description="GenAI operation duration.",
                explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
            ),
            tool_duration=meter.create_histogram(
                n.TOOL_DURATION,
                unit="s",
                description="How long one tool call ran (gate excluded).",
                explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
            ),
            runs=meter.create_counter(
                n.RUNS, unit="{run}", description="Runs (and run segments) ended, by stop cause."
            ),
        )
        object.__setattr__(self, "_instruments", instruments)

    @classmethod
    def from_global(
        cls, *, record_content: bool = False, redact: Redactor | None = None
    ) -> Telemetry:
        """The providers OpenTelemetry's global API holds now (what `--otel` set up, or the
        API's no-ops). For the CLI and applications that configure OpenTelemetry once."""
        from opentelemetry import metrics, trace

        return cls(
            trace.get_tracer_provider(),
            metrics.get_meter_provider(),
            record_content=record_content,
            redact=redact,
        )

    def with_parent(self, traceparent: str | None) -> Telemetry:
        """This telemetry, its runs going under the span `traceparent` names (W3C)."""
        return dataclasses.replace(self, parent=traceparent)

    def with_content(self, record: bool = True, *, redact: Redactor | None = None) -> Telemetry:
        """This telemetry, recording message content (through `redact`) or not."""
        return dataclasses.replace(self, record_content=record, redact=redact)
