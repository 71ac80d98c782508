"""`RiskClass`: what one tool call may do, from the least to the most dangerous.

A tool declares the risk of its calls (`Tool.risk_of`, DESIGN §4 law 12); the policy
engine (`tiller.policy`) turns the risk, the live safety mode and the user's rules into a
decision. It lives with the tools, which declare it, so a tool module need not import the
policy package.
"""

from __future__ import annotations

import enum

__all__ = ["RiskClass"]


class RiskClass(enum.Enum):
    """What a call may do, from the least to the most dangerous (`rank`)."""

    READ_ONLY = "read_only"
    LOW_MUTATION = "low_mutation"
    FILE_MUTATION = "file_mutation"
    SHELL_MUTATION = "shell_mutation"
    NETWORK = "network"
    PROCESS = "process"
    EXTERNAL_ACCESS = "external_access"
    SYSTEM_INSTALL = "system_install"
    DESTRUCTIVE = "destructive"

    @property
    def rank(self) -> int:
        return _ORDER.index(self)

    def at_least(self, other: RiskClass) -> bool:
        return self.rank >= other.rank

    @classmethod
    def parse(cls, text: str) -> RiskClass:
        """The class named `text` (`-` works for `_`), or a `ValueError` listing them."""
        try:
            return cls(text.strip().lower().replace("-", "_"))
        except ValueError:
            names = ", ".join(risk.value for risk in cls)
            raise ValueError(f"unknown risk class {text!r}; the classes are: {names}") from None


_ORDER = list(RiskClass)
