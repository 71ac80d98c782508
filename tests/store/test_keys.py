"""`encode_key` maps any key into what NATS accepts, reversibly; `encoded_prefix` lets a
backend list keys by encoded prefix without missing any."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiller.errors import UsageError
from tiller.store import check_subject, decode_key, encode_key, encoded_prefix

SAFE = re.compile(r"[-/_=.A-Za-z0-9]+")

# Everything, lone surrogates included (client ids arrive as arbitrary strings)...
ANY_TEXT = st.text(st.characters(exclude_categories=()), min_size=1)
# ...and text made mostly of the characters whose encoding depends on their neighbours.
EDGY = st.sampled_from(".=.a/ -_ü😀\x00")
EDGY_TEXT = st.text(EDGY, min_size=1)
KEYS = ANY_TEXT | EDGY_TEXT
# Subjects are capped at 255 characters and an escape takes up to 8 per character.
SHORT_KEYS = st.text(st.characters(exclude_categories=()), min_size=1, max_size=20) | st.text(
    EDGY, min_size=1, max_size=20
)


@given(KEYS)
def test_round_trip(key: str) -> None:
    assert decode_key(encode_key(key)) == key


@given(KEYS)
def test_output_is_what_nats_accepts(key: str) -> None:
    encoded = encode_key(key)
    assert SAFE.fullmatch(encoded)
    assert not encoded.startswith(".")
    assert not encoded.endswith(".")
    assert ".." not in encoded


@given(SHORT_KEYS)
def test_encoded_keys_are_valid_subject_tokens(key: str) -> None:
    assert check_subject(f"runs.{encode_key(key)}.control")


@given(st.text(st.sampled_from(".=a/ ü"), max_size=6) | ANY_TEXT, st.text(max_size=4))
def test_encoded_prefix_prefixes_every_match(prefix: str, rest: str) -> None:
    key = prefix + rest
    if key:
        assert encode_key(key).startswith(encoded_prefix(prefix))


def test_safe_keys_stay_readable() -> None:
    assert encode_key("run-01HZ/step_3.json") == "run-01HZ/step_3.json"
    assert encode_key("a b") == "a=0020b"
    assert encode_key("=") == "=003D"
    assert encode_key(".x.") == "=002Ex=002E"
    assert encode_key("a..b") == "a.=002Eb"
    assert encode_key("😀") == "==01F600"


def test_empty_key_is_refused() -> None:
    with pytest.raises(UsageError):
        encode_key("")
