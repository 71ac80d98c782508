"""A fleet job carries its submitter's `traceparent` to the worker: the run's span goes
under it, on whichever worker takes the job (issue 20)."""

from __future__ import annotations

import uuid
from types import ModuleType

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tiller.fleet import Fleet, RunJob
from tiller.telemetry import Telemetry

from .conftest import Store, ref, running_worker

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SUBMITTER = "b7ad6b7169203331"


@pytest.mark.parametrize("store", ["memory", "sqlite"], indirect=True)
async def test_a_job_runs_under_its_submitters_trace_on_the_worker(
    store: Store, agents: ModuleType
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(provider, MeterProvider())
    run_id = f"traced-{uuid.uuid4().hex}"
    async with await store.open() as bus, running_worker(store, telemetry=telemetry):
        handle = await Fleet(bus).submit(
            ref(agents, "three"),
            "go",
            run_id=run_id,
            traceparent=f"00-{TRACE_ID}-{SUBMITTER}-01",
        )
        result = await handle.result(timeout=30)
    assert result.stop_cause == "completed"
    runs = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert len(runs) == 1
    run = runs[0]
    assert f"{run.context.trace_id:032x}" == TRACE_ID
    assert run.parent is not None and f"{run.parent.span_id:016x}" == SUBMITTER
    assert dict(run.attributes or {})["tiller.run.id"] == run_id
    steps = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert steps and all(
        s.parent is not None and s.parent.span_id == run.context.span_id for s in steps
    )


def test_a_job_record_carries_the_traceparent_and_an_older_one_reads_without() -> None:
    job = RunJob(run_id="r", agent="a:b", prompt="p", traceparent=f"00-{TRACE_ID}-{SUBMITTER}-01")
    assert RunJob.decode("r", job.encode()).traceparent == job.traceparent
    old = b'{"schema_version": 2, "run_id": "r", "agent": "a:b", "prompt": "p"}'
    assert RunJob.decode("r", old).traceparent is None
