"""Model strings: `"anthropic:claude-sonnet-4-5"` and friends, turned into a `Model`.

The CLI, config files and quick scripts name a model with one string; this is the one
place that knows the forms. Provider adapters are imported only when a string asks for
them, so a program that never talks to Anthropic never imports its adapter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from ._base import Model

__all__ = ["resolve_model"]

#: The accepted forms, with an example each (shown in every error about a model string).
_FORMS: tuple[tuple[str, str], ...] = (
    ("openai:<model>", "openai:gpt-4o-mini"),
    ("anthropic:<model>", "anthropic:claude-sonnet-4-5"),
    ("ollama:<model>", "ollama:llama3.1:8b  (served at http://localhost:11434/v1)"),
    ("openai-compat:<base_url>#<model>", "openai-compat:http://localhost:8000/v1#qwen2.5"),
    ("scripted:<path>", "scripted:tests/scripts/hello.yaml  (YAML or JSON)"),
)

_OLLAMA_BASE_URL = "http://localhost:11434/v1"


def resolve_model(spec: str | Model, **overrides: Any) -> Model:
    """The model `spec` names; a `Model` is returned as it is.

    `overrides` go to the adapter's constructor and win over what the string implies, e.g.
    `resolve_model("ollama:qwen2.5", base_url="http://gpu-box:11434/v1")` or
    `resolve_model("openai:gpt-4o", api_key=key, client=http_client)`.

    Raises `UsageError`, listing the accepted forms, for an unknown prefix or a malformed
    string.
    """
    if not isinstance(spec, str):
        if overrides:
            raise UsageError(
                f"resolve_model got a model object and options {sorted(overrides)}; "
                "options only apply to model strings: configure the model object itself"
            )
        return spec
    prefix, sep, rest = spec.strip().partition(":")
    prefix, rest = prefix.strip().lower(), rest.strip()
    if not sep or not rest:
        raise _malformed(spec, "expected <provider>:<model>")

    if prefix in ("openai", "ollama", "openai-compat"):
        from .openai_compat import OpenAICompatModel

        # Only `openai:` may fall back to OPENAI_API_KEY; the other two name a server of
        # the user's choosing, which must not receive their OpenAI key unasked. An empty
        # key means "send none"; pass `api_key=` to give one.
        options: dict[str, Any]
        if prefix == "openai":
            model, options = rest, {"provider": "openai"}
        elif prefix == "ollama":
            model = rest
            options = {"provider": "ollama", "base_url": _OLLAMA_BASE_URL, "api_key": ""}
        else:
            base_url, _, model = rest.partition("#")
            base_url, model = base_url.strip(), model.strip()
            if not model or not base_url.startswith(("http://", "https://")):
                raise _malformed(spec, "expected openai-compat:<http(s) base_url>#<model>")
            options = {"provider": "openai-compat", "base_url": base_url, "api_key": ""}
        return OpenAICompatModel(model, **{**options, **overrides})
    if prefix == "anthropic":
        from .anthropic import AnthropicModel

        return AnthropicModel(rest, **overrides)
    if prefix == "scripted":
        from .scripted import ScriptedModel

        return ScriptedModel.from_file(Path(rest), **overrides)
    raise _malformed(spec, f"unknown provider {prefix!r}")


def _malformed(spec: str, why: str) -> UsageError:
    forms = "\n".join(f"  {form:<34} e.g. {example}" for form, example in _FORMS)
    return UsageError(f"cannot use model string {spec!r}: {why}. Use one of:\n{forms}")
