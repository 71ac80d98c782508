"""Two ways a model call cannot work, said as what they are (issue 18): no API key for the
provider's own endpoint (before: a DNS error offline, a 401 online), and a server that
answers a web page (before: "the connection was probably dropped")."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tiller.conversation import UserMessage
from tiller.model import (
    AnthropicModel,
    ModelError,
    ModelProtocolError,
    ModelRequest,
    OpenAICompatModel,
    resolve_model,
)

from ._servers import LocalServer, Reply, clean_env, collect_until_error

REQUEST = ModelRequest(system=None, messages=[UserMessage(text="hi")])


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch)


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    async with LocalServer() as srv:
        yield srv


async def _first_error(model: OpenAICompatModel | AnthropicModel) -> ModelError:
    with pytest.raises(ModelError) as info:
        async for _ in model.stream(REQUEST):
            pass
    await model.aclose()
    return info.value


async def test_openai_without_a_key_says_which_variable_to_set() -> None:
    error = await _first_error(resolve_model("openai:gpt-4o"))  # type: ignore[arg-type]
    assert str(error) == (
        "openai: no API key: set OPENAI_API_KEY (or pass api_key=); for a local server use "
        "ollama:<model> or openai-compat:<base_url>#<model>"
    )
    assert not error.retryable


async def test_anthropic_without_a_key_says_which_variable_to_set() -> None:
    error = await _first_error(AnthropicModel("claude-sonnet-4-5"))
    assert "set ANTHROPIC_API_KEY" in str(error)
    assert not error.retryable


async def test_a_key_a_base_url_a_lent_client_or_an_auth_header_is_not_missing_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the provider's own URL with nothing that authenticates is refused: the rest
    may be right (a local server, a client or header that carries its own auth)."""
    assert OpenAICompatModel("m", api_key="")._missing_key is None  # "send none", on purpose
    assert OpenAICompatModel("m", base_url="http://127.0.0.1:1/v1")._missing_key is None
    assert OpenAICompatModel("m", extra_headers={"Authorization": "Bearer x"})._missing_key is None
    async with httpx.AsyncClient() as client:
        assert OpenAICompatModel("m", client=client)._missing_key is None
    assert AnthropicModel("c", base_url="http://127.0.0.1:1")._missing_key is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert OpenAICompatModel("m")._missing_key is None


async def test_an_html_answer_is_called_an_html_page(server: LocalServer) -> None:
    server.reply(
        Reply(
            headers=[("content-type", "text/html")],
            chunks=[b"<html><body>Sign in</body></html>"],
            framing="length",
        )
    )
    async with OpenAICompatModel("m", base_url=server.url, api_key="") as model:
        _, info = await collect_until_error(model, REQUEST, ModelProtocolError)
    assert "answered with an HTML page (text/html), not an event stream" in str(info.value)
    assert "base URL" in str(info.value)
    assert "dropped" not in str(info.value)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_an_error_page_that_echoes_the_key_never_shows_it(
    server: LocalServer, kind: str
) -> None:
    """A proxy's 502 page that prints the request's headers: the error (which goes to the
    log, every retry notice, the event stream and served clients) carries no key."""
    key = "sk-test-SECRETSECRET123456"
    page = (
        f"upstream failed; request was: authorization: Bearer {key}\\n"
        f"x-api-key: {key}\\nanother token: sk-other0123456789"
    )
    server.reply(
        Reply(status=502, headers=[("content-type", "text/plain")], chunks=[page.encode()])
    )
    model: OpenAICompatModel | AnthropicModel = (
        OpenAICompatModel("gpt-4o", base_url=f"{server.url}/v1", api_key=key)
        if kind == "openai"
        else AnthropicModel("claude-x", base_url=server.url, api_key=key)
    )
    error = await _first_error(model)
    shown = f"{error} {getattr(error, 'body', '')}"
    assert "SECRET" not in shown and "sk-other" not in shown
    assert "[redacted]" in shown and "upstream failed" in shown
