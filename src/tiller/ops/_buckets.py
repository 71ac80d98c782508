"""Where in the store the operations read and write."""

from __future__ import annotations

from dataclasses import dataclass

from ..store import APPROVALS_BUCKET, DEFAULT_BUCKET

__all__ = ["DEFAULT_BUCKETS", "Buckets"]


@dataclass(frozen=True, slots=True)
class Buckets:
    """The buckets of a run's records: its checkpoints (and call records), and the calls
    it held for a person. The defaults are the ones the loop and the gate write."""

    checkpoints: str = DEFAULT_BUCKET
    approvals: str = APPROVALS_BUCKET


#: The buckets the loop and the gate write by default.
DEFAULT_BUCKETS = Buckets()
