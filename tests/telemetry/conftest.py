"""Fixtures for the telemetry tests: the real SDK with in-memory exporters, given to the
run explicitly (no global provider is touched), and a jail per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tiller.loop import RunContext
from tiller.policy import AllowAll
from tiller.telemetry import Telemetry

from ._tree import Recorded


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(tracer_provider, meter_provider)
    yield Recorded(telemetry, exporter, reader, tracer_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    root = tmp_path / "ws"
    root.mkdir()
    return RunContext.sandboxed(root, AllowAll())
