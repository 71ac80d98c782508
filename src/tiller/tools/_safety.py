"""`SafetyMode`: how much a run's visible tools may do without asking, and the live switch.

The modes are ranked from the most to the least restrictive. A ceiling (a subagent type's,
an operator's) is applied with `least_permissive`, which can only tighten. The mode is
*live*: `LiveSafetyMode` is shared by a run and whoever may change it (a terminal command, a
control request), and each tool call reads it when the call is assembled, so a change
applies to the next call, never to one already running. The policy engine (DESIGN §3)
decides what each mode allows per risk class; this module only names and orders them.
"""

from __future__ import annotations

import enum
import threading

__all__ = ["LiveSafetyMode", "SafetyMode", "least_permissive"]


class SafetyMode(enum.Enum):
    """`read_only` < `ask` (the default) < `auto` < `full_access`."""

    READ_ONLY = "read_only"
    ASK = "ask"
    AUTO = "auto"
    FULL_ACCESS = "full_access"

    @property
    def rank(self) -> int:
        """Permissiveness: higher allows more."""
        return _RANKS[self]

    @classmethod
    def parse(cls, text: str) -> SafetyMode:
        """The mode named `text` (`read_only`, `ask`, `auto`, `full_access`; `-` works
        for `_`), or a `ValueError` that lists the names."""
        try:
            return cls(text.strip().lower().replace("-", "_"))
        except ValueError:
            names = ", ".join(mode.value for mode in cls)
            raise ValueError(f"unknown safety mode {text!r}; the modes are: {names}") from None


_RANKS = {
    SafetyMode.READ_ONLY: 0,
    SafetyMode.ASK: 1,
    SafetyMode.AUTO: 2,
    SafetyMode.FULL_ACCESS: 3,
}


def least_permissive(a: SafetyMode, b: SafetyMode) -> SafetyMode:
    """The stricter of two modes: how a ceiling is applied (it only ever tightens)."""
    return a if a.rank <= b.rank else b


class LiveSafetyMode:
    """A run's current safety mode, changeable while the run works (thread-safe).

    `ceiling` caps every later `set`: a subagent never gets more than its type allows,
    whatever its parent switches to.
    """

    __slots__ = ("_ceiling", "_lock", "_mode")

    def __init__(
        self, mode: SafetyMode = SafetyMode.ASK, *, ceiling: SafetyMode = SafetyMode.FULL_ACCESS
    ) -> None:
        self._lock = threading.Lock()
        self._ceiling = ceiling
        self._mode = least_permissive(mode, ceiling)

    @property
    def mode(self) -> SafetyMode:
        return self._mode

    @property
    def ceiling(self) -> SafetyMode:
        return self._ceiling

    def set(self, mode: SafetyMode) -> SafetyMode:
        """Switch to `mode`, capped by the ceiling; returns the mode now in force."""
        with self._lock:
            self._mode = least_permissive(mode, self._ceiling)
            return self._mode

    def __repr__(self) -> str:
        return f"LiveSafetyMode({self._mode.value}, ceiling={self._ceiling.value})"
