"""`JsonPrefix`: every prefix of a JSON text is accepted and completed into JSON; a text
no JSON starts with is refused (the basis for ending a chunked tool call validly)."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiller.events._json_prefix import JsonPrefix

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


def parses(text: str) -> Any:
    """Both the strict encoder the verifier uses and the validator's `json` accept it."""
    json.loads(text)
    return orjson.loads(text)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(JSON, st.booleans(), st.lists(st.integers(0, 1000), max_size=4))
def test_every_prefix_of_json_is_accepted_and_completes(
    value: Any, spaced: bool, cuts: list[int]
) -> None:
    text = json.dumps(value, ensure_ascii=spaced, indent=1 if spaced else None)
    prefix = JsonPrefix()
    start = 0
    for cut in sorted({min(c, len(text)) for c in cuts} | {len(text)}):
        advanced = prefix.advanced(text[start:cut])
        assert advanced is not None, text[:cut]
        prefix, start = advanced, cut
        parses(text[:cut] + prefix.completion())
    assert prefix.completion() == ""
    assert parses(text) == parses(text + prefix.completion())


@settings(max_examples=500, derandomize=True, database=None, deadline=None)
@given(st.text(alphabet='{}[]",:0123456789-+.eE tfalsenru\\\x01', max_size=12))
def test_whatever_is_accepted_completes_into_json(text: str) -> None:
    prefix = JsonPrefix().advanced(text)
    if prefix is not None:
        parses(text + prefix.completion())


@pytest.mark.parametrize(
    "text", ["}", "{}}", "{} {", "nul!", "01", "[1,]", '{"a" 1}', '"\x01"', "1.e", "-a", '"\\x"']
)
def test_a_text_no_json_starts_with_is_refused(text: str) -> None:
    assert JsonPrefix().advanced(text) is None


def test_the_state_is_left_alone_by_a_refused_text() -> None:
    prefix = JsonPrefix().advanced('{"a": [1')
    assert prefix is not None
    assert prefix.advanced("}") is None
    assert prefix.completion() == "]}"
    assert JsonPrefix().advanced("   ") is not None
    assert JsonPrefix().completion() == "{}"


@pytest.mark.parametrize("cut", range(1, 14))
def test_a_surrogate_pair_cut_anywhere_completes_into_strict_json(cut: int) -> None:
    """A high surrogate alone is refused by strict parsers (orjson), though not by every
    client: the completion adds the low half."""
    text = '"\\ud83d\\ude00"'[:cut]
    prefix = JsonPrefix().advanced(text)
    assert prefix is not None
    parses(text + prefix.completion())
