"""Tests for `resolve_model`: model strings to adapters, and helpful errors."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tiller.conversation import UserMessage
from tiller.errors import UsageError
from tiller.model import (
    AnthropicModel,
    Model,
    ModelError,
    ModelRequest,
    OpenAICompatModel,
    ScriptedModel,
    resolve_model,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-users-openai-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")


@contextlib.asynccontextmanager
async def resolved(spec: str, **overrides: object) -> AsyncIterator[Model]:
    model = resolve_model(spec, **overrides)
    try:
        yield model
    finally:
        await model.aclose()


async def sent_request(spec: str, **overrides: object) -> httpx.Request:
    """The HTTP request the resolved model sends (served offline by a MockTransport)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = (
            b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}'
            b"\n\ndata: [DONE]\n\n"
        )
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    request = ModelRequest(system=None, messages=[UserMessage(text="hi")])
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
        resolved(spec, client=client, **overrides) as model,
    ):
        with contextlib.suppress(ModelError):  # only the request matters here
            async for _ in model.stream(request):
                pass
    assert len(seen) == 1
    return seen[0]


async def test_openai() -> None:
    async with resolved("openai:gpt-4o-mini") as model:
        assert isinstance(model, OpenAICompatModel)
        assert (model.provider, model.name) == ("openai", "gpt-4o-mini")
    request = await sent_request("openai:gpt-4o-mini")
    assert str(request.url) == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-users-openai-key"


async def test_anthropic() -> None:
    async with resolved("anthropic:claude-sonnet-4-5", context_window=200_000) as model:
        assert isinstance(model, AnthropicModel)
        assert (model.provider, model.name, model.context_window) == (
            "anthropic",
            "claude-sonnet-4-5",
            200_000,
        )


async def test_ollama_keeps_colons_in_the_model_name_and_sends_no_key() -> None:
    async with resolved("ollama:llama3.1:8b") as model:
        assert isinstance(model, OpenAICompatModel)
        assert (model.provider, model.name) == ("ollama", "llama3.1:8b")
    request = await sent_request("ollama:llama3.1:8b")
    assert str(request.url) == "http://localhost:11434/v1/chat/completions"
    assert "authorization" not in request.headers  # the user's OpenAI key stays home


async def test_openai_compat_takes_a_base_url_and_sends_only_a_given_key() -> None:
    spec = "openai-compat:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-7B"
    async with resolved(spec) as model:
        assert isinstance(model, OpenAICompatModel)
        assert (model.provider, model.name) == ("openai-compat", "Qwen/Qwen2.5-7B")
    request = await sent_request(spec)
    assert str(request.url) == "http://127.0.0.1:8000/v1/chat/completions"
    assert "authorization" not in request.headers
    keyed = await sent_request(spec, api_key="vllm-key")
    assert keyed.headers["authorization"] == "Bearer vllm-key"


async def test_overrides_win_over_what_the_string_implies() -> None:
    request = await sent_request("ollama:qwen2.5", base_url="http://gpu-box:11434/v1")
    assert request.url.host == "gpu-box"


async def test_the_prefix_is_case_insensitive_and_spaces_are_trimmed() -> None:
    async with resolved("  OpenAI : gpt-4o ") as model:
        assert (model.provider, model.name) == ("openai", "gpt-4o")


async def test_scripted(tmp_path: Path) -> None:
    path = tmp_path / "hello.yaml"
    path.write_text("- hello\n")
    async with resolved(f"scripted:{path}", name="greeter") as model:
        assert isinstance(model, ScriptedModel)
        assert (model.provider, model.name, len(model.turns)) == ("scripted", "greeter", 1)


def test_a_model_object_is_returned_as_is() -> None:
    model = ScriptedModel(["x"])
    assert resolve_model(model) is model
    with pytest.raises(UsageError, match="options only apply to model strings"):
        resolve_model(model, name="other")


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("", "expected <provider>:<model>"),
        ("gpt-4o", "expected <provider>:<model>"),
        ("openai:", "expected <provider>:<model>"),
        ("openai:   ", "expected <provider>:<model>"),
        ("gemini:pro", "unknown provider 'gemini'"),
        ("openai-compat:localhost:8000#m", "openai-compat:<http(s) base_url>#<model>"),
        ("openai-compat:http://localhost:8000/v1", "openai-compat:<http(s) base_url>#<model>"),
        ("openai-compat:http://localhost:8000/v1#", "openai-compat:<http(s) base_url>#<model>"),
    ],
)
def test_a_malformed_string_lists_the_accepted_forms(spec: str, why: str) -> None:
    with pytest.raises(UsageError) as info:
        resolve_model(spec)
    message = str(info.value)
    assert why in message
    for form in ("openai:<model>", "anthropic:<model>", "ollama:<model>", "scripted:<path>"):
        assert form in message
    assert "openai-compat:<base_url>#<model>" in message


def test_a_missing_script_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read the model script"):
        resolve_model(f"scripted:{tmp_path / 'missing.yaml'}")


def test_the_model_package_exports_are_sorted_complete_and_lazy() -> None:
    import subprocess
    import sys

    import tiller.model

    assert tiller.model.__all__ == sorted(tiller.model.__all__)
    for name in tiller.model.__all__:
        assert hasattr(tiller.model, name), f"tiller.model.{name} is listed but missing"
    assert set(tiller.model.__all__) <= set(dir(tiller.model))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = tiller.model.Nope  # type: ignore[attr-defined]
    # a fresh interpreter: importing the package loads no provider adapter (nor httpx)
    code = (
        "import sys, tiller.model; "
        "print(sorted(m for m in sys.modules if m.endswith(('openai_compat', 'anthropic')) "
        "or m == 'httpx'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
