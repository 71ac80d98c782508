"""Pub/sub subjects of the fleet's records: a hint that a record changed (never the
record itself), so a waiter wakes at once instead of at its next poll."""

from __future__ import annotations

import hashlib

from ..store import check_subject, encode_key

__all__ = ["hint_subject"]


def hint_subject(root: str, key: str) -> str:
    """`<root>.<encode_key(key)>`, or a digest of `key` when that is too long for a
    subject (two keys sharing one only wake each other's waiters, which read their own)."""
    subject = f"{root}.{encode_key(key)}"
    if len(subject) > 255:
        subject = f"{root}.=h{hashlib.sha256(key.encode()).hexdigest()}"
    return check_subject(subject)
