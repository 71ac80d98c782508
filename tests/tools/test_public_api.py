"""`tiller.tools` exports everything it lists, sorted; its errors sit under TillerError."""

from __future__ import annotations

import tiller.tools
import tiller.tools.builtin
from tiller import TillerError, UsageError


def test_all_is_sorted_and_complete() -> None:
    for module in (tiller.tools, tiller.tools.builtin):
        assert module.__all__ == sorted(module.__all__, key=lambda n: (not n.isupper(), n))
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is listed but missing"


def test_error_tree() -> None:
    assert issubclass(tiller.tools.DuplicateTool, UsageError)
    assert issubclass(tiller.tools.ToolDefinitionError, UsageError)
    assert issubclass(tiller.tools.PathOutsideJail, TillerError)
    # A signal tools raise on purpose: `except TillerError` must not swallow it.
    assert not issubclass(tiller.tools.ToolError, TillerError)
    for refusal in (
        tiller.tools.InvalidPath,
        tiller.tools.PathTooLong,
        tiller.tools.SymlinkRefused,
        tiller.tools.HardLinkRefused,
    ):
        assert issubclass(refusal, tiller.tools.PathOutsideJail)
    assert issubclass(tiller.tools.ChecklistError, TillerError)
    assert issubclass(tiller.tools.WebBudgetExceeded, TillerError)
    assert issubclass(tiller.tools.UnknownJob, TillerError)
    assert issubclass(tiller.tools.SandboxUnavailable, TillerError)
