"""What the tests read back: the finished spans as a tree of names, and the metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tiller.telemetry import Telemetry


@dataclass
class Recorded:
    telemetry: Telemetry
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]

    def tree(self) -> list[Any]:
        return tree(self.spans())

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Metric name -> [(attributes, value: sum, or histogram count)]."""
        data = self.reader.get_metrics_data()
        found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = (point.count, point.sum)  # type: ignore[attr-defined]
                        found.setdefault(metric.name, []).append(
                            (dict(point.attributes or {}), value)
                        )
        return found


def tree(spans: Sequence[ReadableSpan]) -> list[Any]:
    """The spans as nested `(name, [children])`, children in start order; a root is a
    span whose parent is not among `spans`."""
    by_id = {s.context.span_id: s for s in spans}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent if parent in by_id else None, []).append(span)

    def build(span: ReadableSpan) -> Any:
        kids = sorted(children.get(span.context.span_id, []), key=lambda s: s.start_time or 0)
        return (span.name, [build(k) for k in kids]) if kids else span.name

    roots = sorted(children.get(None, []), key=lambda s: s.start_time or 0)
    return [build(r) for r in roots]


def render(spans: Sequence[ReadableSpan]) -> str:
    """The tree as indented text, each span with its key attributes (for the README)."""
    by_id = {s.context.span_id: s for s in spans}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent if parent in by_id else None, []).append(span)
    shown = (
        "gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
        "gen_ai.response.finish_reasons", "gen_ai.tool.call.id", "tiller.gate.decision",
        "tiller.gate.decided_by", "tiller.risk_class", "tiller.stop_cause", "tiller.steps",
    )  # fmt: skip
    lines: list[str] = []

    def walk(span: ReadableSpan, depth: int) -> None:
        attrs = span.attributes or {}
        facts = " ".join(f"{k.split('.', 1)[1]}={_show(attrs[k])}" for k in shown if k in attrs)
        lines.append(f"{'  ' * depth}{span.name}  {facts}".rstrip())
        for kid in sorted(children.get(span.context.span_id, []), key=lambda s: s.start_time or 0):
            walk(kid, depth + 1)

    for root in sorted(children.get(None, []), key=lambda s: s.start_time or 0):
        walk(root, 0)
    return "\n".join(lines)


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)
