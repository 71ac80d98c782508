"""Red-team scenarios (issue 13): a hostile scripted model driven through the real CLI.

Each scenario runs `tiller run`, `tiller approve` or `tiller serve` as a subprocess, as a
user would, and checks what an attacker would want to change from outside: the `Host`
fixture gives every test

- `sentinel`: a directory beside the workspace (outside the jail) whose content is hashed
  before and after (`host.assert_untouched()`);
- `marker`: a path outside the jail that planted hooks, MCP servers and git hooks try to
  create (`host.marker_command` is the shell command that creates it);
- `listener`: a 127.0.0.1 HTTP server on a thread that records every request, the bait
  for exfiltration (`host.listener.received()`), and a `.env` with a unique secret in the
  workspace (`host.secret`).

The whole directory carries the `redteam` mark: `pytest -m redteam tests/redteam`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

CLI_TIMEOUT = 120


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.redteam)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "redteam: end-to-end attack scenarios (issue 13)")


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def text(self) -> str:
        head = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        return f"{self.method} {self.path}\n{head}\n\n{self.body.decode(errors='replace')}"


@dataclass
class Listener:
    """A loopback HTTP server that records every request it gets. `/redirect` answers
    302 to `/landing` on the same port, for redirect-hop checks."""

    server: ThreadingHTTPServer
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def received(self) -> list[Request]:
        with self.lock:
            return list(self.requests)

    def everything(self) -> str:
        return "\n".join(r.text() for r in self.received())

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[Request]:
        """Poll until `count` requests arrived (a hang guard for positive checks)."""
        deadline = time.monotonic() + timeout
        while len(self.received()) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.received()


def _start_listener() -> Listener:
    holder: dict[str, Listener] = {}

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            listener = holder["listener"]
            with listener.lock:
                listener.requests.append(
                    Request(self.command, self.path, dict(self.headers.items()), body)
                )
            if self.path.startswith("/redirect"):
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{listener.port}/landing")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            payload = b"ok\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = _record

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    listener = Listener(server)
    holder["listener"] = listener
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return listener


def tree_digest(root: Path) -> dict[str, str]:
    """`root` and every entry under it (not following symlinks) -> a digest of what it
    is (kind, mode, content)."""
    found: dict[str, str] = {".": f"dir:{root.lstat().st_mode:o}"}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if path.is_symlink():
                found[rel] = f"link:{os.readlink(path)}"
            elif path.is_file():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[rel] = f"file:{st.st_mode:o}:{digest}"
            else:
                found[rel] = f"dir:{st.st_mode:o}"
    return found


@dataclass
class Host:
    """What lies outside the jail, and the workspace the hostile model is given."""

    tmp: Path
    workspace: Path
    sentinel: Path
    marker: Path
    listener: Listener
    secret: str
    store: str
    before: dict[str, str] = field(default_factory=dict)

    @property
    def marker_command(self) -> str:
        return f"touch {shlex.quote(str(self.marker))}"

    def script(self, turns: list[Any], name: str = "script") -> Path:
        """A scripted model file (JSON is YAML) with these steps."""
        path = self.tmp / f"{name}-{uuid.uuid4().hex[:6]}.json"
        path.write_text(json.dumps({"turns": turns}))
        return path

    def tiller(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """`python -m tiller ARGS` as a user runs it, on this test's store."""
        return run_tiller(*args, "--store", self.store, cwd=cwd)

    def run(
        self, turns: list[Any], *flags: str, task: str = "do the task"
    ) -> subprocess.CompletedProcess[str]:
        """`tiller run` on the workspace with a scripted model playing `turns`."""
        return self.run_script(self.script(turns), *flags, task=task)

    def run_script(
        self, script: Path, *flags: str, task: str = "do the task"
    ) -> subprocess.CompletedProcess[str]:
        return self.tiller(
            "run", task, "-m", f"scripted:{script}", "-w", str(self.workspace), *flags
        )

    def assert_untouched(self) -> None:
        """Nothing outside the jail changed, and no planted file ran a host process, even
        once the user runs `git status` in the workspace, as they would after a run."""
        user_git_status(self.workspace, ceiling=self.tmp)
        assert not self.marker.exists(), "a planted file ran a process on the host"
        assert tree_digest(self.sentinel) == self.before, "something outside the jail changed"

    def assert_no_secret_sent(self) -> None:
        assert self.secret not in self.listener.everything(), "the secret reached the listener"


def user_git_status(workspace: Path, *, ceiling: Path) -> None:
    """`git status` in `workspace` as the user runs it (their hooks and fsmonitor on);
    discovery stops at `ceiling` so no repository above the test is ever read."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    subprocess.run(
        ["git", "status"],
        cwd=workspace,
        capture_output=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted turn that makes one tool call."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def run_tiller(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiller", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sentinel = tmp_path / "outside"
    sentinel.mkdir()
    (sentinel / "keep.txt").write_text("the host's own file\n")
    (sentinel / "sub").mkdir()
    (sentinel / "sub" / "data.bin").write_bytes(os.urandom(256))
    secret = f"SECRET-{uuid.uuid4().hex}"
    (workspace / ".env").write_text(f"API_KEY={secret}\n")
    (workspace / "README.md").write_text("# project\n")
    listener = _start_listener()
    found = Host(
        tmp=tmp_path,
        workspace=workspace,
        sentinel=sentinel,
        marker=sentinel / "MARKER-host-code-ran",
        listener=listener,
        secret=secret,
        store=f"sqlite:///{tmp_path / 'store.db'}",
    )
    found.before = tree_digest(sentinel)
    try:
        yield found
    finally:
        listener.server.shutdown()
        listener.server.server_close()
