"""What `tiller run` says when the model cannot be reached as it should: a missing key, a
server that answers a web page, a provider that fails and is retried (issue 18).

The real command in a child process, stdin not a terminal, against a local HTTP server
speaking OpenAI's wire format (`tests/model/_servers.py`).

Before: with no key, `-m openai:gpt-4o` said "could not connect … Name or service not
known"; a 200 `text/html` answer read "the connection was probably dropped"; retries were
a silent pause.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from ..model._servers import LocalServer, Reply, json_reply, openai_sse


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "TILLER_")) and "proxy" not in k.lower()
    }
    return {**env, **extra}


async def run_tiller(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """`python -m tiller ARGS` without a terminal, awaited so a server in this loop answers."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tiller",
        *args,
        cwd=cwd,
        env=env if env is not None else _env(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(120):  # a hang guard, not a timing assertion
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _answer(text: str) -> Reply:
    return openai_sse(
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        "[DONE]",
    )


async def test_a_missing_key_names_the_variable_to_set(tmp_path: Path) -> None:
    code, out, err = await run_tiller(
        "run", "hi", "-m", "openai:gpt-4o", "--store", "memory://", cwd=tmp_path
    )
    assert code == 1, err
    said = [line for line in out.splitlines() if "OPENAI_API_KEY" in line]
    assert said == [
        "error [MODEL_ERROR]: openai: no API key: set OPENAI_API_KEY (or pass api_key=); for a "
        "local server use ollama:<model> or openai-compat:<base_url>#<model>"
    ]
    assert "could not connect" not in out
    assert "Name or service not known" not in out


async def test_an_html_page_is_called_one_not_a_dropped_connection(tmp_path: Path) -> None:
    async with LocalServer() as server:
        page = Reply(
            headers=[("content-type", "text/html; charset=utf-8")],
            chunks=[b"<!doctype html><html><body>Welcome to the dashboard</body></html>"],
            framing="length",
        )
        server.reply(page)
        url = server.url
        code, out, err = await run_tiller(
            "run", "hi", "-m", f"openai-compat:{url}#m", "--store", "memory://", cwd=tmp_path
        )
    assert code == 1, err
    errors = [line for line in out.splitlines() if "HTML" in line]
    assert errors == [
        f"error [MODEL_ERROR]: openai-compat: {url}/chat/completions answered with an "
        "HTML page (text/html; charset=utf-8), not an event stream: is the base URL right? (an "
        "OpenAI-compatible one usually ends in /v1)"
    ]  # once: the summary does not repeat the line the view printed
    assert "dropped" not in out


async def test_a_retry_is_shown_before_its_wait(tmp_path: Path) -> None:
    async with LocalServer() as server:
        server.reply(
            json_reply(500, {"error": {"message": "The server had an error", "type": "server"}}),
            _answer("Hello after the retry."),
        )
        code, out, err = await run_tiller(
            "run",
            "hi",
            "-m",
            f"openai-compat:{server.url}/v1#m",
            "--store",
            "memory://",
            cwd=tmp_path,
        )
    assert code == 0, out + err
    lines = out.splitlines()
    (retry,) = [n for n, line in enumerate(lines) if line.startswith("retrying in ")]
    assert lines[retry].endswith(" s (attempt 2 of 4): HTTP 500: The server had an error")
    assert lines[retry + 1] == "assistant Hello after the retry."


@pytest.mark.parametrize("key", ["sk-test", ""])
async def test_a_key_or_a_deliberate_none_sends_the_request(tmp_path: Path, key: str) -> None:
    """The missing-key refusal is only for the provider's own URL with nothing set: a
    local server named by OPENAI_BASE_URL gets the request, key or no key."""
    async with LocalServer() as server:
        server.reply(_answer("Hi."))
        env = _env(OPENAI_BASE_URL=f"{server.url}/v1", OPENAI_API_KEY=key)
        code, out, err = await run_tiller(
            "run", "hi", "-m", "openai:gpt-4o", "--store", "memory://", cwd=tmp_path, env=env
        )
    assert code == 0, out + err
    assert "assistant Hi." in out.splitlines()
