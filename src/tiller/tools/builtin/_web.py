"""`web_fetch`: fetch a web page and return it as text, within the step's web byte budget.

All fetches of one step share the step's `WebBudget` (`ctx.web_budget()`), charged
chunk by chunk, error bodies and retries included; parallel fetches are served in arrival
order, so those that fit complete and one that would cross the budget fails alone; see
`Fetcher` for the HTTP side (redirects, the one retry, the per-body cap, what is not
downloaded). This module turns a
`Fetched` into what the model reads: a header line (final URL, status, type, size), then
an HTML page as readable text (`html_to_text`), other text as it is, a binary body as a
short description; a note when the body was cut; a non-2xx status as an error showing the
start of the body; running out of the step's budget as an error saying so.

Where it may connect is the run's `WebAccess` (`ctx.jail.web`, from `tiller.toml [web]`):
private, loopback, link-local and metadata addresses, and names that resolve to them, are
refused on every redirect hop, checked on the address actually connected to, unless a
person allowed the host or range. A refusal is a tool error saying so.

The transport is a seam: a program may put an `httpx.AsyncBaseTransport` under
`ctx.config["http_transport"]` (an `httpx.MockTransport` in tests, a proxy or custom TLS
in production). It is borrowed, never closed, and it makes the connections itself: then
only hosts that spell an address, and `localhost` names, are vetted, since the transport
resolves other names. Without it, the `VettedTransport` is used. The model cannot set it
(only the program's code can).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Final

import httpx
from pydantic import Field

from ...errors import UsageError
from .._exec import ExecContext
from .._fetcher import Fetched, Fetcher
from .._html import html_to_text
from .._risk_class import RiskClass
from .._tool import Capability, ToolOutput, tool
from .._web_budget import WebBudgetExceeded

__all__ = ["web_fetch"]

#: The `ctx.config` key under which a run may give `web_fetch` an httpx transport.
TRANSPORT_CONFIG_KEY: Final = "http_transport"
#: Characters of an error body's text shown in the result.
ERROR_PREVIEW_CHARS: Final = 2000


# ── the tool ────────────────────────────────────────────────────────────────────────


# Not read-only, though it changes nothing here: a GET sends its URL (and whatever the
# model put in it) to another host. The policy engine classes it as network access, and
# the interlock counts it as a send (law 3: fail closed).
@tool(
    capabilities=Capability.UNTRUSTED_INPUT | Capability.EXTERNAL_SEND,
    risk=RiskClass.NETWORK,
    denial_remedy="Answer from what you already know, or ask the user for the page's content.",
)
async def web_fetch(
    url: str,
    max_bytes: Annotated[int, Field(gt=0)] | None = None,
    *,
    ctx: ExecContext,
) -> ToolOutput:
    """Fetch a web page (http or https) and return its text: an HTML page as readable
    text (title, headings, paragraphs, lists, links as `text (url)`), JSON, XML or plain
    text as is. Images, PDFs and other binary files are described, not returned.
    Redirects are followed (up to 5). A status that is not 2xx is an error showing the
    start of the body. All fetches of one step share a download budget. Private,
    loopback and link-local addresses (and names that resolve to them) are refused
    unless the user allowed them.

    Args:
        url: The full URL, e.g. `https://docs.python.org/3/library/asyncio.html`.
        max_bytes: Read at most this many bytes of the body (the rest is cut and the
            result says so); default and maximum 16 MiB.
    """
    transport = ctx.config.get(TRANSPORT_CONFIG_KEY)
    if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
        raise UsageError(
            f"config[{TRANSPORT_CONFIG_KEY!r}] must be an httpx.AsyncBaseTransport "
            f"(for example httpx.AsyncHTTPTransport()), not {type(transport).__name__}"
        )
    budget = ctx.web_budget()
    fetcher = Fetcher(budget, access=ctx.jail.web, transport=transport, progress=ctx.progress)
    try:
        fetched = await fetcher.fetch(url, max_bytes=max_bytes)
    except WebBudgetExceeded as exc:
        left = f" ({exc.remaining} bytes are left)" if exc.remaining else ""
        return ToolOutput(
            f"the step's web download budget is exhausted ({budget.limit} bytes for all "
            f"fetches of this step), so {url.strip()} was not fetched in full{left}. Work "
            "with what you have, fetch fewer or smaller pages (max_bytes), or continue in "
            "the next step.",
            is_error=True,
            data={"url": url.strip(), "budget_exhausted": True},
        )
    content = await asyncio.to_thread(_render, fetched)
    return ToolOutput(content, is_error=not fetched.ok, data=_summary(fetched))


# ── rendering ───────────────────────────────────────────────────────────────────────


def _render(fetched: Fetched) -> str:
    """What the model reads: a header line, then the body as text (or why there is
    none), then a note if it was cut. Runs in a worker thread: parsing megabytes of
    HTML must not stall the event loop."""
    lines = [_header(fetched)]
    if fetched.redirects:
        lines.append(f"(redirected from {fetched.redirects[0]})")
    if fetched.attempts > 1:
        lines.append("(answered on the second attempt)")
    if not fetched.ok:
        return "\n".join([*lines, *_error_body(fetched)])
    if not fetched.read:
        size = f"{fetched.length} bytes" if fetched.length is not None else "size not given"
        lines += [
            "",
            f"[binary content not shown: {fetched.media_type}, {size}. web_fetch returns "
            "text only (HTML, plain text, JSON, XML).]",
        ]
        return "\n".join(lines)
    text = _as_text(fetched)
    lines += ["", text if text.strip() else "(empty body)"]
    if fetched.truncated:
        lines += ["", _truncation_note(fetched)]
    return "\n".join(lines)


def _header(fetched: Fetched) -> str:
    kind = fetched.media_type or "no content type"
    size = f"{len(fetched.body)} bytes" if fetched.read else "body not downloaded"
    return f"{fetched.final_url} — {fetched.status} {fetched.reason}, {kind}, {size}".rstrip()


def _error_body(fetched: Fetched) -> list[str]:
    lines = [f"HTTP {fetched.status} {fetched.reason}: the server did not return the page."]
    if fetched.retry_refused:
        lines.append(f"The server asked to retry after {fetched.retry_after:g} s; try again later.")
    text = _as_text(fetched).strip() if fetched.kind != "binary" else ""
    if text:
        cut = len(text) > ERROR_PREVIEW_CHARS or fetched.truncated
        lines += ["The body starts:", "", text[:ERROR_PREVIEW_CHARS] + (" [...]" if cut else "")]
    return lines


def _as_text(fetched: Fetched) -> str:
    kind = fetched.kind
    if kind == "html":
        return html_to_text(fetched.text(), fetched.final_url)
    if kind == "text":
        return fetched.text()
    size = len(fetched.body)
    return f"[binary content not shown: {fetched.media_type or 'unknown type'}, {size} bytes]"


def _truncation_note(fetched: Fetched) -> str:
    got = len(fetched.body)
    of = f" of {fetched.length}" if fetched.length is not None else ""
    return (
        f"[truncated: only the first {got}{of} bytes were read (the limit for this "
        f"fetch is {fetched.cap} bytes). Call again with a larger max_bytes (at most the "
        "per-page limit), or fetch a more specific page.]"
    )


def _summary(fetched: Fetched) -> dict[str, Any]:
    """The structured result, for the program (not shown to the model)."""
    return {
        "url": fetched.url,
        "final_url": fetched.final_url,
        "status": fetched.status,
        "content_type": fetched.media_type,
        "bytes": len(fetched.body),
        "truncated": fetched.truncated,
        "redirects": list(fetched.redirects),
        "attempts": fetched.attempts,
    }
