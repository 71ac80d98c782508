"""`configure_otlp()`: the OpenTelemetry SDK with OTLP/HTTP exporters, for `--otel`.

The endpoint, headers, service name and the rest come from the standard `OTEL_*`
environment variables, read by the SDK itself (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, ...).
Nothing is sent anywhere the user did not configure: with no endpoint set the SDK's
default is the local collector (`http://localhost:4318`); `OTEL_TRACES_EXPORTER=none` or
`OTEL_METRICS_EXPORTER=none` sends none of that signal; and what this cannot send as
asked (another exporter, a protocol other than `http/protobuf`) is refused, not sent
some other way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
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
    place. `OtelMissing` (a message naming the extra) without the SDK; `UsageError` when
    `OTEL_*` asks for an export this cannot make."""
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
    traces, metrics_ = _exported(os.environ)
    # The service is "tiller" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say.
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "tiller"}))
    tracer_provider = TracerProvider(resource=resource)
    if traces:
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    readers = [PeriodicExportingMetricReader(OTLPMetricExporter())] if metrics_ else []
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)

    def shutdown() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    telemetry = Telemetry(tracer_provider, meter_provider, record_content=record_content)
    return OtlpSetup(telemetry, shutdown)


def _exported(environ: Mapping[str, str]) -> tuple[bool, bool]:
    """Whether traces and metrics are exported, as `OTEL_TRACES_EXPORTER` and
    `OTEL_METRICS_EXPORTER` say (`otlp`, the default, or `none`); `UsageError` naming the
    variable for an exporter or an OTLP protocol this does not send with."""
    exported = []
    for signal in ("TRACES", "METRICS"):
        variable = f"OTEL_{signal}_EXPORTER"
        names = {name.strip() for name in environ.get(variable, "otlp").split(",")} - {""}
        if names - {"otlp", "none"} or names == {"otlp", "none"}:
            raise UsageError(
                f"--otel exports over OTLP only: {variable}={environ[variable]!r} is not "
                "supported (use otlp, or none to export no "
                f"{signal.lower()})"
            )
        exported.append(names != {"none"})
    for variable, signal_on in (
        ("OTEL_EXPORTER_OTLP_PROTOCOL", any(exported)),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", exported[0]),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", exported[1]),
    ):
        protocol = environ.get(variable, "").strip()
        if signal_on and protocol not in ("", "http/protobuf"):
            raise UsageError(
                f"--otel sends OTLP over HTTP (http/protobuf): {variable}={protocol!r} is "
                "not supported"
            )
    return exported[0], exported[1]
