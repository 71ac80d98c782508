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


def test_the_resume_errors_are_importable_from_tiller() -> None:
    """Pins the break where `RunStillRunning` (what a recovery raises while a live process
    holds the run's lease) could only be imported from `tiller.store._checkpoints`."""
    import tiller.loop
    import tiller.store

    assert tiller.RunStillRunning is tiller.store.RunStillRunning
    assert tiller.AlreadyResumed is tiller.store.AlreadyResumed
    assert tiller.ResumeReplayBlocked is tiller.loop.ResumeReplayBlocked
    for name in ("AlreadyResumed", "ResumeReplayBlocked", "RunStillRunning"):
        assert name in tiller.__all__
    assert "RunStillRunning" in tiller.store.__all__
    assert issubclass(tiller.RunStillRunning, tiller.TillerError)


#: `TillerError`s that never leave tiller: each is caught where it is raised and turned
#: into a result, a log line or another error, so a user has nothing to catch.
_INTERNAL_ERRORS = {
    # The compaction step catches it and records why it gave up (RunState.compaction).
    "tiller.loop._summary.SummaryFailed",
}


def test_every_error_a_user_can_meet_has_a_public_import() -> None:
    """Pins the sibling break of `RunStillRunning`: `TillerError`s defined in private
    modules (`MalformedRecord`, `PatternTooSlow`) that a public API raises, but that no
    public namespace exported, so catching them meant importing a private module."""
    import importlib
    import pkgutil

    public: set[type] = set()
    defined: dict[str, type] = {}
    for info in pkgutil.walk_packages(tiller.__path__, "tiller."):
        if info.name == "tiller.__main__" or info.name.startswith(
            ("tiller.store._nats", "tiller.examples")
        ):
            continue  # runs the CLI; NATS needs an optional extra; examples are not API
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, tiller.TillerError)
                and value.__module__ == info.name
                and not value.__name__.startswith("_")
            ):
                defined[f"{info.name}.{value.__name__}"] = value
        if not any(part.startswith("_") for part in info.name.split(".")):
            exported = getattr(module, "__all__", ())
            public.update(v for n in exported if isinstance(v := getattr(module, n), type))
    public.update(getattr(tiller, n) for n in tiller.__all__ if n != "__version__")
    private_only = sorted(
        name for name, cls in defined.items() if cls not in public and name not in _INTERNAL_ERRORS
    )
    assert private_only == [], f"export these from a public namespace: {private_only}"


def test_run_controls_are_public_beside_the_run_context() -> None:
    """Law 13's `RunControls` is exported where `RunContext` is (`tiller.loop`)."""
    assert "RunControls" in tiller.loop.__all__
    assert tiller.loop.RunControls is tiller.loop._controls.RunControls
