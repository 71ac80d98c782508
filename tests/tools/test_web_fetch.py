"""`web_fetch` against a real HTTP/1.1 server on 127.0.0.1: text, redirects, errors,
retries, truncation, the step's shared byte budget, and cancellation.

Loopback is refused by default (`test_web_ssrf.py`), so these contexts allow 127.0.0.1 as
a person would in `tiller.toml [web] allow_hosts`."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tiller import CancellationToken, Cancelled
from tiller.conversation import ToolCall
from tiller.events import CustomEvent, Event
from tiller.tools import (
    ExecContext,
    Execution,
    Jail,
    Outcome,
    Registry,
    ToolError,
    WebAccess,
    WebBudget,
)
from tiller.tools._fetcher import Fetcher
from tiller.tools.builtin import web_fetch

# ── a small HTTP/1.1 server ─────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]


Handler = Callable[[Request, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def send(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes = b"",
    *,
    content_type: str | None = "text/plain; charset=utf-8",
    headers: dict[str, str] | None = None,
) -> None:
    """One whole response, then the connection closes (`Connection: close`)."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    fields = {"Content-Length": str(len(body)), "Connection": "close"}
    if content_type is not None:
        fields["Content-Type"] = content_type
    fields.update(headers or {})
    lines += [f"{name}: {value}" for name, value in fields.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()


def reply(
    status: int,
    body: bytes = b"",
    *,
    content_type: str | None = "text/plain; charset=utf-8",
    headers: dict[str, str] | None = None,
) -> Handler:
    async def handle(request: Request, _: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await send(w, status, body, content_type=content_type, headers=headers)

    return handle


def redirect(location: str, status: int = 302) -> Handler:
    return reply(status, b"moved", headers={"Location": location})


def in_turn(*handlers: Handler) -> Handler:
    """The n-th request gets the n-th handler; the last one answers every later request."""
    served = 0

    async def handle(request: Request, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal served
        served += 1
        await handlers[min(served, len(handlers)) - 1](request, r, w)

    return handle


async def hang_up(request: Request, _: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    """Close the connection without answering."""


class LocalServer:
    """An asyncio HTTP/1.1 server on 127.0.0.1 with a route per path; counts hits."""

    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}
        self.hits: Counter[str] = Counter()
        self.disconnected = asyncio.Event()  # a trickling response saw its client leave
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> LocalServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            method, path, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
            headers: dict[str, str] = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            self.hits[path] += 1
            handler = self.routes.get(path, reply(404, b"no such page"))
            await handler(Request(method, path, headers), reader, writer)
        except (ConnectionError, ValueError):
            pass  # the client went away mid-response, as budget and cancel tests make it
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._tasks.discard(task)

    def trickle(self) -> Handler:
        """A response that never ends: a few bytes at a time until the client leaves."""

        async def handle(_: Request, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000000\r\n\r\n"
            )
            gone = asyncio.ensure_future(reader.read(1))  # b"" once the client closes
            try:
                while not gone.done():
                    w.write(b"x" * 64)
                    await w.drain()
                    await asyncio.wait({gone}, timeout=0.01)
            except ConnectionError:
                pass
            finally:
                gone.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await gone
            self.disconnected.set()

        return handle


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    async with LocalServer() as running:
        yield running


# ── running the tool as the loop does ───────────────────────────────────────────────

REGISTRY = Registry([web_fetch])


async def fetch(ctx: ExecContext, url: str, call_id: str = "call-1", **args: Any) -> Execution:
    call = ToolCall(
        id=call_id, name="web_fetch", arguments=orjson.dumps({"url": url, **args}).decode()
    )
    async with asyncio.timeout(30):  # a hang guard, not a timing assertion
        return await REGISTRY.execute(call, ctx)


#: The test servers' host, allowed as a person would allow it.
LOCAL = WebAccess.from_config({"allow_hosts": ["127.0.0.1"]})


def context(tmp_path: Path, budget: WebBudget | None = None, **fields: Any) -> ExecContext:
    tools = Jail(tmp_path, web=LOCAL)
    return ExecContext.for_test(tmp_path, jail=tools, web_bytes=budget or WebBudget(), **fields)


def progress_of(events: list[Event]) -> list[dict[str, Any]]:
    return [e.value for e in events if isinstance(e, CustomEvent) and e.name == "tiller.progress"]


# ── what the model reads ────────────────────────────────────────────────────────────

PAGE = b"""<!doctype html><html><head><title>Release notes</title>
<script>track()</script><style>p { margin: 0 }</style></head>
<body><nav><a href="/">Home</a> | <a href="/blog">Blog</a></nav>
<h1>Version 2.0</h1><p>Faster   startup, see the <a href="/bench">benchmarks</a>.</p>
<ul><li>new parser</li><li>fewer deps</li></ul></body></html>"""


async def test_an_html_page_becomes_readable_text(tmp_path: Path, server: LocalServer) -> None:
    server.routes["/notes"] = reply(200, PAGE, content_type="text/html; charset=utf-8")
    budget = WebBudget()
    done = await fetch(context(tmp_path, budget), server.url("/notes"))
    assert done.outcome is Outcome.OK
    assert done.result.content == (
        f"{server.url('/notes')} — 200 OK, text/html, {len(PAGE)} bytes\n"
        "\n"
        "Title: Release notes\n"
        "\n"
        "# Version 2.0\n"
        "\n"
        f"Faster startup, see the benchmarks ({server.url('/bench')}).\n"
        "\n"
        "- new parser\n"
        "- fewer deps"
    )
    assert budget.used == len(PAGE)
    assert done.data["status"] == 200 and done.data["bytes"] == len(PAGE)


async def test_json_is_returned_as_is(tmp_path: Path, server: LocalServer) -> None:
    body = b'{"name": "tiller", "tags": ["agents", "runtime"]}'
    server.routes["/api"] = reply(200, body, content_type="application/json")
    done = await fetch(context(tmp_path), server.url("/api"))
    assert done.outcome is Outcome.OK
    header, _, text = done.result.content.partition("\n\n")
    assert header == f"{server.url('/api')} — 200 OK, application/json, {len(body)} bytes"
    assert text == body.decode()


async def test_the_response_charset_decodes_text(tmp_path: Path, server: LocalServer) -> None:
    server.routes["/latin"] = reply(
        200, "crème brûlée".encode("latin-1"), content_type="text/plain; charset=ISO-8859-1"
    )
    server.routes["/meta"] = reply(
        200,
        '<meta charset="windows-1252"><p>na\u00efve</p>'.encode("cp1252"),
        content_type="text/html",
    )
    server.routes["/broken"] = reply(200, b"ok \xff\xfe end", content_type="text/plain")
    server.routes["/odd"] = reply(200, b"plain", content_type="text/plain; charset=base64")
    ctx = context(tmp_path)
    assert (await fetch(ctx, server.url("/latin"))).result.content.endswith("\n\ncrème brûlée")
    assert (await fetch(ctx, server.url("/meta"))).result.content.endswith("\n\nnaïve")
    broken = await fetch(ctx, server.url("/broken"))
    assert broken.result.content.endswith("\n\nok \ufffd\ufffd end")
    # A charset that is not a text encoding falls back to UTF-8.
    assert (await fetch(ctx, server.url("/odd"))).result.content.endswith("\n\nplain")


async def test_compressed_bodies_are_charged_decoded(tmp_path: Path, server: LocalServer) -> None:
    text = b"all work and no play " * 500
    server.routes["/gz"] = reply(
        200, gzip.compress(text), headers={"Content-Encoding": "gzip"}, content_type="text/plain"
    )
    budget = WebBudget()
    done = await fetch(context(tmp_path, budget), server.url("/gz"))
    assert done.result.content.endswith("\n\n" + text.decode())
    assert budget.used == len(text)


async def test_a_binary_body_is_described_not_downloaded(
    tmp_path: Path, server: LocalServer
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20
    server.routes["/logo.png"] = reply(200, png, content_type="image/png")
    budget = WebBudget()
    done = await fetch(context(tmp_path, budget), server.url("/logo.png"))
    assert done.outcome is Outcome.OK
    assert done.result.content == (
        f"{server.url('/logo.png')} — 200 OK, image/png, body not downloaded\n"
        "\n"
        f"[binary content not shown: image/png, {len(png)} bytes. web_fetch returns text "
        "only (HTML, plain text, JSON, XML).]"
    )
    assert budget.used == 0


async def test_an_untyped_body_is_sniffed(tmp_path: Path, server: LocalServer) -> None:
    blob = b"\x00\x01\x02" * 400_000
    server.routes["/blob"] = reply(200, blob, content_type="application/octet-stream")
    server.routes["/readme"] = reply(200, b"# Read me\nplain words", content_type=None)
    budget = WebBudget()
    ctx = context(tmp_path, budget)
    binary = await fetch(ctx, server.url("/blob"))
    assert "[binary content not shown: application/octet-stream" in binary.result.content
    assert "\x00" not in binary.result.content
    # Reading stopped soon after the start showed it was binary; what was read is paid.
    assert 0 < budget.used < len(blob)
    before = budget.used
    text = await fetch(ctx, server.url("/readme"))
    assert text.result.content.endswith("\n\n# Read me\nplain words")
    assert budget.used - before == len(b"# Read me\nplain words")


# ── redirects ───────────────────────────────────────────────────────────────────────


async def test_a_redirect_chain_is_followed(tmp_path: Path, server: LocalServer) -> None:
    server.routes["/a"] = redirect("/b", 301)
    server.routes["/b"] = redirect(server.url("/c"), 307)
    server.routes["/c"] = redirect("d", 303)  # relative to /c
    server.routes["/d"] = reply(200, b"arrived")
    budget = WebBudget()
    done = await fetch(context(tmp_path, budget), server.url("/a"))
    assert done.outcome is Outcome.OK
    assert done.result.content == (
        f"{server.url('/d')} — 200 OK, text/plain, 7 bytes\n"
        f"(redirected from {server.url('/a')})\n"
        "\n"
        "arrived"
    )
    assert done.data["redirects"] == [server.url(p) for p in ("/a", "/b", "/c")]
    assert budget.used == len(b"arrived")  # the redirects' bodies were not read


async def test_five_redirects_are_followed_six_are_too_many(
    tmp_path: Path, server: LocalServer
) -> None:
    for n in range(7):
        server.routes[f"/hop/{n}"] = redirect(f"/hop/{n + 1}")
    server.routes["/hop/5"] = reply(200, b"five hops")
    ctx = context(tmp_path)
    assert (await fetch(ctx, server.url("/hop/0"))).result.content.endswith("five hops")

    server.routes["/hop/5"] = redirect("/hop/6")
    server.routes["/hop/6"] = reply(200, b"six hops")
    server.hits.clear()
    done = await fetch(ctx, server.url("/hop/0"))
    assert done.outcome is Outcome.ERROR
    assert done.result.content.startswith("too many redirects (more than 5): ")
    assert done.result.content.endswith(
        f"-> {server.url('/hop/6')}; fetch the last URL directly if it is the page you want"
    )
    assert "/hop/6" not in server.hits  # not requested


async def test_a_redirect_to_another_scheme_is_refused(tmp_path: Path, server: LocalServer) -> None:
    server.routes["/away"] = redirect("file:///etc/passwd")
    done = await fetch(context(tmp_path), server.url("/away"))
    assert done.outcome is Outcome.ERROR
    assert done.result.content == (
        f"{server.url('/away')} redirected to file:///etc/passwd, which web_fetch does not "
        "follow: only http:// and https:// URLs can be fetched"
    )


# ── errors and retries ──────────────────────────────────────────────────────────────


async def test_a_404_is_an_error_with_the_start_of_the_body(
    tmp_path: Path, server: LocalServer
) -> None:
    body = b"<html><title>Oops</title><h1>Not here</h1><p>Try the index.</p></html>"
    server.routes["/gone"] = reply(404, body, content_type="text/html")
    budget = WebBudget()
    done = await fetch(context(tmp_path, budget), server.url("/gone"))
    assert done.outcome is Outcome.ERROR
    assert done.result.content == (
        f"{server.url('/gone')} — 404 Not Found, text/html, {len(body)} bytes\n"
        "HTTP 404 Not Found: the server did not return the page.\n"
        "The body starts:\n"
        "\n"
        "Title: Oops\n\n# Not here\n\nTry the index."
    )
    assert server.hits["/gone"] == 1  # a 404 is not retried
    assert budget.used == len(body)  # error bodies are paid for


async def test_a_500_is_retried_once_and_both_bodies_are_charged(
    tmp_path: Path, server: LocalServer
) -> None:
    body = b"database is down"
    server.routes["/broken"] = reply(500, body, headers={"Retry-After": "0"})
    budget = WebBudget()
    done = await fetch(context(tmp_path, budget), server.url("/broken"))
    assert done.outcome is Outcome.ERROR
    assert server.hits["/broken"] == 2
    assert budget.used == 2 * len(body)
    assert done.result.content == (
        f"{server.url('/broken')} — 500 Internal Server Error, text/plain, 16 bytes\n"
        "(answered on the second attempt)\n"
        "HTTP 500 Internal Server Error: the server did not return the page.\n"
        "The body starts:\n"
        "\n"
        "database is down"
    )


async def test_a_503_then_a_page(tmp_path: Path, server: LocalServer) -> None:
    busy, page = b"busy, come back", b"the page"
    server.routes["/flaky"] = in_turn(reply(503, busy), reply(200, page))  # default backoff
    budget = WebBudget()
    events: list[Event] = []
    done = await fetch(context(tmp_path, budget, emit=events.append), server.url("/flaky"))
    assert done.outcome is Outcome.OK
    assert done.result.content.endswith("(answered on the second attempt)\n\nthe page")
    assert budget.used == len(busy) + len(page)
    statuses = [p["message"] for p in progress_of(events) if p["kind"] == "status"]
    assert statuses == [
        f"GET {server.url('/flaky')}",
        "503 Service Unavailable; retrying in 0.5s",
        f"GET {server.url('/flaky')} (retry)",
    ]


async def test_a_long_retry_after_is_not_waited_for(tmp_path: Path, server: LocalServer) -> None:
    server.routes["/limited"] = reply(429, b"slow down", headers={"Retry-After": "3600"})
    done = await fetch(context(tmp_path), server.url("/limited"))
    assert done.outcome is Outcome.ERROR
    assert server.hits["/limited"] == 1
    assert "The server asked to retry after 3600 s; try again later." in done.result.content


async def test_a_dropped_connection_is_retried(tmp_path: Path, server: LocalServer) -> None:
    server.routes["/drop"] = in_turn(hang_up, reply(200, b"second time lucky"))
    done = await fetch(context(tmp_path), server.url("/drop"))
    assert done.outcome is Outcome.OK
    assert done.result.content.endswith("second time lucky")
    assert server.hits["/drop"] == 2


async def test_an_unreachable_host_is_an_error_after_one_retry(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = await fetch(context(tmp_path), f"http://127.0.0.1:{port}/")
    assert done.outcome is Outcome.ERROR
    assert done.result.content.startswith(
        f"could not fetch http://127.0.0.1:{port}/ (tried twice): could not connect"
    )


# ── limits ──────────────────────────────────────────────────────────────────────────


async def test_max_bytes_truncates_with_a_note(tmp_path: Path, server: LocalServer) -> None:
    server.routes["/big"] = reply(200, b"y" * 100_000)
    budget = WebBudget()
    done = await fetch(context(tmp_path, budget), server.url("/big"), max_bytes=1000)
    assert done.outcome is Outcome.OK
    header, body, note = done.result.content.split("\n\n")
    assert header == f"{server.url('/big')} — 200 OK, text/plain, 1000 bytes"
    assert body == "y" * 1000
    assert note == (
        "[truncated: only the first 1000 of 100000 bytes were read (the limit for this fetch "
        "is 1000 bytes). Call again with a larger max_bytes (at most the per-page limit), or "
        "fetch a more specific page.]"
    )
    assert budget.used == 1000 and done.data["truncated"] is True


async def test_the_budget_body_limit_caps_every_body(tmp_path: Path, server: LocalServer) -> None:
    server.routes["/big"] = reply(200, b"y" * 100_000)
    budget = WebBudget(body_limit=2048)
    done = await fetch(context(tmp_path, budget), server.url("/big"), max_bytes=50_000)
    assert done.data["bytes"] == 2048 and done.data["truncated"] is True
    assert budget.used == 2048


async def test_going_over_the_step_budget_fails_the_call(
    tmp_path: Path, server: LocalServer
) -> None:
    server.routes["/small"] = reply(200, b"s" * 600)
    server.routes["/big"] = reply(200, b"b" * 5000)
    budget = WebBudget(limit=1000)
    ctx = context(tmp_path, budget)
    assert (await fetch(ctx, server.url("/small"))).outcome is Outcome.OK
    done = await fetch(ctx, server.url("/big"))
    assert done.is_error
    assert done.result.content.startswith("the step's web download budget is exhausted (1000 ")
    assert "(400 bytes are left)" in done.result.content
    assert "b" * 10 not in done.result.content  # nothing of the page that did not fit
    assert budget.used == 600  # refused on its announced size: none of its body was read
    # The refusal did not saturate the budget: a page that fits what is left still comes,
    # and one that would cross it does not.
    server.routes["/tiny"] = reply(200, b"t" * 400)
    assert (await fetch(ctx, server.url("/tiny"))).outcome is Outcome.OK
    assert budget.used == budget.limit == 1000 and budget.reserved == 0
    assert (await fetch(ctx, server.url("/tiny"))).is_error


async def test_max_bytes_must_be_positive(tmp_path: Path) -> None:
    done = await fetch(context(tmp_path), "http://127.0.0.1:1/", max_bytes=0)
    assert done.outcome is Outcome.INVALID_ARGUMENTS


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "file:///etc/passwd",
            "web_fetch fetches only http:// and https:// URLs, not file:// "
            "('file:///etc/passwd'). To read a workspace file, use read_file.",
        ),
        (
            "ftp://ftp.example.com/pub/file.txt",
            "web_fetch fetches only http:// and https:// URLs, not ftp:// "
            "('ftp://ftp.example.com/pub/file.txt').",
        ),
        (
            "example.com/page",
            "web_fetch fetches only http:// and https:// URLs, not a URL without a scheme "
            "('example.com/page').",
        ),
        (
            "http:///path",
            "'http:///path' has no host; give a full URL such as https://example.com/",
        ),
    ],
)
async def test_only_http_and_https_are_fetched(tmp_path: Path, url: str, message: str) -> None:
    budget = WebBudget()
    done = await fetch(context(tmp_path, budget), url)
    assert done.outcome is Outcome.ERROR
    assert done.result.content == message
    assert budget.used == 0


async def test_parallel_fetches_never_exceed_the_step_budget(
    tmp_path: Path, server: LocalServer
) -> None:
    page = b"Z" * (300 * 1024)
    for n in range(5):
        server.routes[f"/page/{n}"] = reply(200, page)
    server.routes["/error/5"] = reply(500, page, headers={"Retry-After": "0"})
    for n in (6, 7):
        server.routes[f"/flaky/{n}"] = in_turn(reply(503, page), reply(200, page))
    paths = [*(f"/page/{n}" for n in range(5)), "/error/5", "/flaky/6", "/flaky/7"]
    budget = WebBudget(limit=1 << 20)
    ctx = context(tmp_path, budget)

    done = await asyncio.gather(
        *(fetch(ctx, server.url(path), f"call-{n}") for n, path in enumerate(paths))
    )

    assert budget.used <= budget.limit and budget.reserved == 0
    delivered = sum(each.result.content.count("Z") for each in done)
    assert delivered <= budget.limit
    exhausted = [each for each in done if "web download budget is exhausted" in each.result.content]
    assert exhausted and all(each.is_error for each in exhausted)
    whole = [each for each in done if each.outcome is Outcome.OK]
    assert len(whole) == 3  # 3 of the 300 KiB pages fit in 1 MiB beside the error previews
    for each in whole:  # a page that came back came back whole
        assert each.data["bytes"] == len(page) and not each.data["truncated"]
    assert server.hits["/error/5"] in (1, 2)

    # A fetch later in the step is refused on its announced size, reading none of it.
    left = budget.remaining
    later = await fetch(ctx, server.url("/page/0"), "call-later")
    assert later.is_error
    assert later.result.content == (
        "the step's web download budget is exhausted (1048576 bytes for all fetches of this "
        f"step), so {server.url('/page/0')} was not fetched in full ({left} bytes are left). "
        "Work with what you have, fetch fewer or smaller pages (max_bytes), or continue in "
        "the next step."
    )
    assert later.data == {"url": server.url("/page/0"), "budget_exhausted": True}
    assert budget.remaining == left


async def test_parallel_fetches_over_the_budget_complete_those_that_fit(
    tmp_path: Path, server: LocalServer
) -> None:
    """Pins the break where six parallel fetches of 15 MiB in a 64 MiB turn completed none
    (the saturating counter failed every call once the sum crossed the limit) and read far
    more than the budget. Scaled down: six pages of 15 units in a step of 64 units. Those
    that fit complete in full, in arrival order; the rest fail having read nothing."""
    unit = 16 * 1024
    page = b"P" * (15 * unit)
    for n in range(6):
        server.routes[f"/big/{n}"] = reply(200, page)
    budget = WebBudget(limit=64 * unit)
    ctx = context(tmp_path, budget)

    done = await asyncio.gather(
        *(fetch(ctx, server.url(f"/big/{n}"), f"call-{n}") for n in range(6))
    )

    whole = [each for each in done if each.outcome is Outcome.OK]
    refused = [each for each in done if each.is_error]
    assert len(whole) == 4 and len(refused) == 2
    for each in whole:
        assert each.data["bytes"] == len(page) and not each.data["truncated"]
        assert each.result.content.endswith("P" * 100)
    for each in refused:
        assert each.data["budget_exhausted"] is True
        assert f"({4 * unit} bytes are left)" in each.result.content
    assert budget.used == 4 * len(page) and budget.reserved == 0  # nothing read for the two


def chunked(body: bytes, piece: int = 4096) -> Handler:
    """A 200 response without `Content-Length` (chunked), so nothing can be reserved."""

    async def handle(_: Request, __: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        for start in range(0, len(body), piece):
            part = body[start : start + piece]
            w.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await w.drain()
        w.write(b"0\r\n\r\n")
        await w.drain()

    return handle


async def test_an_unannounced_body_fails_at_the_chunk_that_would_cross(
    tmp_path: Path, server: LocalServer
) -> None:
    """Without a size to reserve, each chunk is paid as it arrives: the fetch whose next
    chunk would cross the budget fails then, keeping nothing, and the counter never goes
    past the limit. A page that fits, fetched first, came whole."""
    server.routes["/stream"] = chunked(b"c" * 50_000)
    server.routes["/short"] = chunked(b"s" * 3000)
    budget = WebBudget(limit=20_000)
    ctx = context(tmp_path, budget)

    short = await fetch(ctx, server.url("/short"))
    assert short.outcome is Outcome.OK and short.data["bytes"] == 3000
    crossed = await fetch(ctx, server.url("/stream"))
    assert crossed.is_error and crossed.data["budget_exhausted"] is True
    assert "c" * 10 not in crossed.result.content
    assert 3000 < budget.used <= budget.limit and budget.reserved == 0


# ── progress, cancellation, the transport seam ──────────────────────────────────────


async def test_progress_reports_requests_and_bytes(tmp_path: Path, server: LocalServer) -> None:
    body = b"p" * 5000
    server.routes["/r"] = redirect("/p")
    server.routes["/p"] = reply(200, body)
    events: list[Event] = []
    await fetch(context(tmp_path, emit=events.append), server.url("/r"))
    reports = progress_of(events)
    assert [r["message"] for r in reports if r["kind"] == "status"] == [
        f"GET {server.url('/r')}",
        f"redirected to {server.url('/p')}",
        f"GET {server.url('/p')}",
    ]
    counts = [(r["done"], r.get("total")) for r in reports if r["kind"] == "bytes"]
    assert counts[-1] == (5000, 5000)
    assert [done for done, _ in counts] == sorted(done for done, _ in counts)


async def test_cancelling_stops_the_download_and_closes_the_connection(
    tmp_path: Path, server: LocalServer
) -> None:
    server.routes["/forever"] = server.trickle()
    token = CancellationToken()

    def emit(event: Event) -> None:
        if isinstance(event, CustomEvent) and event.value["kind"] == "bytes":
            token.cancel("the user pressed Esc")

    budget = WebBudget()
    with pytest.raises(Cancelled):
        await fetch(context(tmp_path, budget, token=token, emit=emit), server.url("/forever"))
    async with asyncio.timeout(10):  # hang guard: the server must see the client leave
        await server.disconnected.wait()
    assert 0 < budget.used < 1_000_000


async def test_a_transport_from_the_config_is_used_and_not_closed(tmp_path: Path) -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"ok": True})

    class Recording(httpx.MockTransport):
        closed = False

        async def aclose(self) -> None:
            self.closed = True

    transport = Recording(handle)
    ctx = context(tmp_path, config={"http_transport": transport})
    for _ in range(2):
        done = await fetch(ctx, "https://api.example.test/status")
        assert done.result.content.endswith('\n\n{"ok":true}')
    assert seen == ["https://api.example.test/status"] * 2
    assert not transport.closed


async def test_a_wrong_transport_in_the_config_is_a_clear_crash(tmp_path: Path) -> None:
    done = await fetch(context(tmp_path, config={"http_transport": "socks://x"}), "http://a.b/")
    assert done.outcome is Outcome.CRASHED
    assert "must be an httpx.AsyncBaseTransport" in done.result.content


async def test_the_fetcher_alone(server: LocalServer) -> None:
    server.routes["/x"] = in_turn(reply(502, b"bad gateway"), reply(200, b"fine"))
    budget = WebBudget()
    fetched = await Fetcher(budget, access=LOCAL, backoff=0).fetch(server.url("/x"))
    assert (fetched.status, fetched.body, fetched.attempts) == (200, b"fine", 2)
    assert fetched.text() == "fine" and fetched.kind == "text"
    assert budget.used == len(b"bad gateway") + len(b"fine")


async def test_a_server_that_goes_silent_times_out(server: LocalServer) -> None:
    async def stall(_: Request, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
        await w.drain()
        await reader.read()  # until the client gives up and closes

    server.routes["/stall"] = stall
    budget = WebBudget()
    with pytest.raises(ToolError) as caught:
        async with asyncio.timeout(30):  # hang guard
            await Fetcher(budget, access=LOCAL, timeout=0.2).fetch(server.url("/stall"))
    assert caught.value.message == (
        f"could not fetch {server.url('/stall')}: the server sent nothing for 0.2 s"
    )
    assert server.hits["/stall"] == 1  # a timeout is not retried
    assert budget.used == len(b"only this")
