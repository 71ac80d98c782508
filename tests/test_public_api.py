"""The public namespace is complete and sorted, so a forgotten export fails CI."""

from __future__ import annotations

import tiller
import tiller.events
import tiller.loop


def test_all_is_sorted_and_complete() -> None:
    for module in (tiller, tiller.events, tiller.loop):
        assert module.__all__ == sorted(module.__all__, key=lambda n: (not n.isupper(), n))
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is listed but missing"


def test_every_error_is_a_tiller_error() -> None:
    import tiller.errors

    for name in tiller.errors.__all__:
        assert issubclass(getattr(tiller.errors, name), tiller.TillerError)
        assert name in tiller.__all__, f"tiller.{name} should be exported"


def test_run_controls_are_public_beside_the_run_context() -> None:
    """Law 13's `RunControls` is exported where `RunContext` is (`tiller.loop`)."""
    assert "RunControls" in tiller.loop.__all__
    assert tiller.loop.RunControls is tiller.loop._controls.RunControls
