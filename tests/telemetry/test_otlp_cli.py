"""`tiller run --otel` exports over OTLP/HTTP to the endpoint `OTEL_*` names (here a
receiver the test starts), and says how to install the SDK when it is missing."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from typer.testing import CliRunner

from tiller.cli import app

SRC = Path(__file__).resolve().parents[2] / "src"

AGENT = '''
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import tool


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return "found " + key


agent = Agent(
    ScriptedModel([{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]}, "done"]),
    [lookup],
    name="otel-agent",
)
'''


class _Receiver(BaseHTTPRequestHandler):
    received: dict[str, list[bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.setdefault(self.path, []).append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, dict[str, list[bytes]]]]:
    received: dict[str, list[bytes]] = {}
    handler = type("Handler", (_Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


async def _run_otel(url: str, tmp_path: Path, **otel: str) -> tuple[int | None, str]:
    """`tiller run --otel` in a child process, exporting to `url` (with the `OTEL_*`
    variables `otel` adds): its exit code and its stderr."""
    agents, workspace = tmp_path / "agents", tmp_path / "ws"
    agents.mkdir()
    workspace.mkdir()
    (agents / "otel_agent.py").write_text(AGENT)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "PYTHONPATH": str(SRC),
        "OTEL_EXPORTER_OTLP_ENDPOINT": url,
        "OTEL_SERVICE_NAME": "tiller-test",
        **otel,
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tiller",
        "run",
        "look it up",
        "--agent",
        "otel_agent:agent",
        "--workspace",
        str(workspace),
        "--yes",
        "--otel",
        cwd=agents,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(120):  # a hang guard
        out, err = await child.communicate()
    return child.returncode, out.decode() + err.decode()


async def test_tiller_run_otel_exports_spans_and_metrics_over_otlp_http(
    receiver: tuple[str, dict[str, list[bytes]]], tmp_path: Path
) -> None:
    url, received = receiver
    code, said = await _run_otel(url, tmp_path)
    assert code == 0, said

    spans = []
    for body in received.get("/v1/traces", []):
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            assert service["service.name"] == "tiller-test"
            for scope in resource.scope_spans:
                assert scope.scope.name == "tiller"
                spans.extend(scope.spans)
    names = sorted(span.name for span in spans)
    assert names == [
        "chat scripted",
        "chat scripted",
        "execute_tool lookup",
        "invoke_agent otel-agent",
    ]
    (run,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert all(s.trace_id == run.trace_id for s in spans)
    assert all(s.parent_span_id == run.span_id for s in spans if s is not run)
    attrs = {a.key: a.value for a in run.attributes}
    assert attrs["tiller.stop_cause"].string_value == "completed"
    assert attrs["gen_ai.operation.name"].string_value == "invoke_agent"

    metric_names = set()
    for body in received.get("/v1/metrics", []):
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                metric_names.update(m.name for m in scope.metrics)
    assert {
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "tiller.tool.duration",
        "tiller.runs",
    } <= metric_names


@pytest.mark.parametrize(
    ("variable", "sent", "not_sent"),
    [("OTEL_METRICS_EXPORTER", "/v1/traces", "/v1/metrics"),
     ("OTEL_TRACES_EXPORTER", "/v1/metrics", "/v1/traces")],
)  # fmt: skip
async def test_an_exporter_set_to_none_sends_nothing(
    receiver: tuple[str, dict[str, list[bytes]]],
    tmp_path: Path,
    variable: str,
    sent: str,
    not_sent: str,
) -> None:
    """The standard variables say what is exported: `none` is nothing of that signal."""
    url, received = receiver
    code, said = await _run_otel(url, tmp_path, **{variable: "none"})
    assert code == 0, said
    assert received.get(sent)
    assert not_sent not in received


@pytest.mark.parametrize(
    "otel",
    [{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
     {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
     {"OTEL_TRACES_EXPORTER": "zipkin"}],
    ids=str,
)  # fmt: skip
async def test_an_export_otel_cannot_make_is_refused_in_one_line(
    receiver: tuple[str, dict[str, list[bytes]]], tmp_path: Path, otel: dict[str, str]
) -> None:
    """Not sent some other way than the user asked for: refused before the run."""
    url, received = receiver
    code, said = await _run_otel(url, tmp_path, **otel)
    assert code == 2, said
    (variable,) = otel
    assert variable in said and "Traceback" not in said, said
    assert received == {}


def test_without_the_sdk_otel_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in [
        m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))
    ]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter", None)
    for command in (
        ["run", "hi", "--model", "scripted:x", "--workspace", str(tmp_path), "--otel"],
        ["worker", "--store", f"sqlite:///{tmp_path / 's.db'}", "--otel"],
        ["serve", "--store", f"sqlite:///{tmp_path / 's.db'}", "--otel"],
    ):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, (command, result.output)
        lines = [line for line in result.output.splitlines() if "pip install" in line]
        assert len(lines) == 1 and "pip install 'tiller[otel]'" in lines[0], result.output
