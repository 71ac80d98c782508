"""tiller's `gen_ai.*` names are the semantic-conventions package's (0.66b2)."""

from __future__ import annotations

import importlib.metadata

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as semconv
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes

from tiller.telemetry import SEMCONV_VERSION, _names


def test_the_version_named_is_the_one_installed() -> None:
    assert importlib.metadata.version("opentelemetry-semantic-conventions") == SEMCONV_VERSION


def test_every_gen_ai_attribute_is_the_conventions_own() -> None:
    theirs = {
        value
        for name, value in vars(semconv).items()
        if name.startswith("GEN_AI_") and isinstance(value, str)
    }
    ours = {
        value
        for name, value in vars(_names).items()
        if name.isupper()
        and isinstance(value, str)
        and value.startswith("gen_ai.")
        and name not in {"TOKEN_USAGE", "OPERATION_DURATION"}
    }
    assert ours and ours <= theirs, ours - theirs


def test_operations_token_types_and_metrics() -> None:
    operations = {v.value for v in semconv.GenAiOperationNameValues}
    assert {_names.INVOKE_AGENT, _names.CHAT, _names.EXECUTE_TOOL} <= operations
    assert semconv.GenAiTokenTypeValues.INPUT.value == _names.TOKEN_TYPE_INPUT
    assert semconv.GenAiTokenTypeValues.OUTPUT.value == _names.TOKEN_TYPE_OUTPUT
    assert _names.TOKEN_USAGE == gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE
    assert _names.OPERATION_DURATION == gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION
    assert _names.ERROR_TYPE == error_attributes.ERROR_TYPE


def test_tiller_facts_are_namespaced() -> None:
    for name, value in vars(_names).items():
        if name.isupper() and isinstance(value, str) and "." in value and name != "SEMCONV_VERSION":
            assert value.startswith(("gen_ai.", "tiller.", "error.")), name
