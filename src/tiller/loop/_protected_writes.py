"""The gate's refusal of a write to protected policy, before hooks or a person see it.

The file tools refuse such writes themselves (`ProtectedPathRefused`, at the jail); the
gate refuses them first, so the refusal says who refused (law 4: "Blocked by policy"),
no hook runs and no person is asked to approve what no mode allows (law 11).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..tools import Jail, PathOutsideJail

__all__ = ["protected_write_refusal"]


def protected_write_refusal(jail: Jail, paths: Iterable[str]) -> str | None:
    """The reason a write to `paths` (as the call names them) is refused, or None when
    none of them is protected. A path the jail refuses is left to the tool to word."""
    for path in paths:
        try:
            covering = jail.protects(jail.resolve(path))
        except PathOutsideJail:
            continue
        if covering is not None:
            return (
                f"`{path}` is protected policy (covered by `{covering}`), which the model "
                "may not write, move or delete in any mode; a person edits it between runs"
            )
    return None
