"""`create_app(..., transformers=)`: each served run's events pass through a chain the
factory builds for that run alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from tiller import UsageError
from tiller.events import Event, FilterToolCalls, TextMessageContentEvent
from tiller.examples.console_agent import make_agent
from tiller.serve import AppSettings, create_app

from .conftest import post_run, run_input

HELLO = [{"id": "u1", "role": "user", "content": "hello"}]


class Shout:
    """Upper-cases the text a client sees."""

    def transform(self, event: Event) -> Iterable[Event]:
        if isinstance(event, TextMessageContentEvent):
            return (dataclasses.replace(event, delta=event.delta.upper()),)
        return (event,)


def test_served_runs_each_get_their_own_transformers(serve: Callable[..., str]) -> None:
    """Broke on main: `create_app` had no `transformers=`, so a server could not shape
    its stream at all."""
    made: list[Shout] = []

    def factory() -> list[Shout]:
        made.append(Shout())
        return made[-1:]

    url = serve(make_agent(), transformers=factory)
    for run_id in ("r1", "r2"):
        events = post_run(url, run_input(f"t-{run_id}", run_id, HELLO))  # validated
        text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert text == "YOU SAID: HELLO"
    assert len(made) == 2 and made[0] is not made[1]


def test_a_list_where_the_factory_belongs_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="factory"):
        create_app(
            make_agent(),
            AppSettings(
                store="memory://",
                token=None,
                workspace=tmp_path,
                transformers=[FilterToolCalls.deny(["x"])],  # type: ignore[arg-type]
            ),
        )
