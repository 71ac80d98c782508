"""The run's phase: what the model may see and do.

`PLAN` hides every tool that is not read-only (and refuses one called anyway);
`EXECUTE` shows them all. The phase lives on the run's context and in its `RunState`.
"""

from __future__ import annotations

import enum

__all__ = ["Phase"]


class Phase(enum.Enum):
    PLAN = "plan"
    EXECUTE = "execute"
