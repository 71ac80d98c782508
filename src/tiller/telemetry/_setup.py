"""`configure_otlp()`: the OpenTelemetry SDK with OTLP/HTTP exporters, for `--otel`.

The endpoint, headers, service name and the rest come from the standard `OTEL_*`
environment variables, read by the SDK itself (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, ...).
Nothing is sent anywhere the user did not configure: with no endpoint set the SDK's
default is the local collector (`http://localhost:4318`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UsageError
from ._telemetry import Telemetry

__all__ = ["OtelMissing", "OtlpSetup", "configure_otlp"]

INSTALL_HINT = "pip install 'tiller[otel]'"


class OtelMissing(UsageError):
    """`--otel` was asked for, and the OpenTelemetry SDK or its OTLP exporter is not
    installed."""


@dataclass(frozen=True, slots=True)
class OtlpSetup:
    """The configured telemetry, and `shutdown()`, which flushes and stops the exporters
    (call it before the process exits, or the last spans are lost)."""

    telemetry: Telemetry
    shutdown: Callable[[], None]


def configure_otlp(*, record_content: bool = False) -> OtlpSetup:
    """Providers with OTLP/HTTP exporters configured from `OTEL_*`; also installed as
    OpenTelemetry's global providers, so libraries the tools use trace into the same
    place. `OtelMissing` (a message naming the extra) without the SDK."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise OtelMissing(
            f"--otel needs the OpenTelemetry SDK and OTLP exporter: {INSTALL_HINT}"
        ) from exc
    # The service is "tiller" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say.
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "tiller"}))
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)

    def shutdown() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    telemetry = Telemetry(tracer_provider, meter_provider, record_content=record_content)
    return OtlpSetup(telemetry, shutdown)
