"""`tiller run --web` as a user runs it: a scripted model asks `web_fetch` for a service on
127.0.0.1; the run refuses it, unless the person's `tiller.toml` allows the host."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SCRIPT = """
turns:
  - tool_calls:
      - {{name: web_fetch, arguments: {{url: "{url}"}}}}
  - "Done."
"""


class Secret(BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        body = b"the admin token is hunter2"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def secret_service() -> Iterator[ThreadingHTTPServer]:
    Secret.hits = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Secret)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def run(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT.format(url=url))
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "tiller", "run", "look", "-m", f"scripted:{script}"]
    return subprocess.run(
        [*command, "-w", str(workspace), "--web", "--yes", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_a_run_refuses_a_loopback_service(
    tmp_path: Path, secret_service: ThreadingHTTPServer
) -> None:
    port = secret_service.server_address[1]
    done = run(tmp_path, f"http://localhost:{port}/admin")
    assert done.returncode == 0, done.stderr
    assert "← web_fetch: web_fetch refuses localhost" in done.stdout
    assert "hunter2" not in done.stdout
    assert Secret.hits == 0


def test_a_person_allows_the_host_in_tiller_toml(
    tmp_path: Path, secret_service: ThreadingHTTPServer
) -> None:
    port = secret_service.server_address[1]
    config = tmp_path / "person" / "tiller.toml"
    config.parent.mkdir()
    config.write_text(f'[web]\nallow_hosts = ["localhost:{port}"]\n')
    done = run(tmp_path, f"http://localhost:{port}/admin", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "refuses" not in done.stdout
    assert Secret.hits == 1
