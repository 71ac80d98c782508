"""A resumed eval compares each stored case with the case as it is now in a canonical
form, so it reruns no scored run of an unchanged case: a set in its metadata (stored in
whatever order the writing process's hash seed gave), a NaN (stored as null), a value
JSON cannot carry (stored as its `repr`, which holds a memory address)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tiller.evals import Case, Eval
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.model.scripted import TurnInfo
from tiller.store import Bus

from ._runner_support import Includes, Messages

#: Run in a child process: an eval of one case whose metadata holds a set of strings
#: (their order follows PYTHONHASHSEED); prints how many times its model was called.
CHILD = """
import asyncio, sys
from tiller.evals import Case, Eval, Includes
from tiller.loop import Agent
from tiller.model import ScriptedModel

calls = []

def answer(messages, info):
    calls.append(messages[0].text)
    return "yes"

WORDS = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}
case = Case("c1", "say yes", expected="yes", metadata={"words": WORDS, "n": {1, 2, 3}})

async def main():
    await Eval(lambda: Agent(ScriptedModel(answer)), [case], [Includes()],
               store=sys.argv[1], eval_id="seeded").run()

asyncio.run(main())
print("order", ",".join(WORDS))
print("calls", len(calls))
"""


def _child(script: Path, store: str, seed: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, str(script), store],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def test_a_set_in_metadata_resumed_under_another_hash_seed_is_not_run_again(
    tmp_path: Path,
) -> None:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    store = f"sqlite:///{tmp_path / 'evals.db'}"
    first = _child(script, store, "1")
    second = _child(script, store, "2")
    assert first["order"] != second["order"]  # the seeds do give the set two orders
    assert (first["calls"], second["calls"]) == ("1", "0")


class Counting:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __call__(self, messages: Messages, info: TurnInfo) -> str:
        self.calls[messages[0].text] += 1
        return "yes"

    def agent(self) -> Agent:
        return Agent(ScriptedModel(self))


class Opaque:
    """A value JSON cannot carry: stored as its repr, which differs per object."""


async def test_a_nan_or_a_value_kept_only_as_its_repr_is_not_a_change(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    def cases() -> list[Case]:
        metadata = {"threshold": float("nan"), "helper": Opaque(), "tags": {"b", "a"}}
        return [
            Case("c1", "say yes", expected="yes", metadata=metadata),
            Case("c2", "say yes too", expected="yes", metadata={"helper": [Opaque()]}),
        ]

    await Eval(Counting().agent, cases(), [Includes()], store=bus, eval_id="ev", epochs=2).run()
    again = Counting()
    with caplog.at_level(logging.WARNING, logger="tiller.evals"):
        report = await Eval(
            again.agent, cases(), [Includes()], store=bus, eval_id="ev", epochs=2
        ).run()
    assert not again.calls
    assert [result.attempt for result in report.results] == [0, 0, 0, 0]
    warnings = [r for r in caplog.records if "only as its repr" in r.getMessage()]
    assert len(warnings) == 1, caplog.text  # once per eval, not once per case run


async def test_a_real_change_next_to_a_set_is_still_seen(bus: Bus) -> None:
    await Eval(
        Counting().agent,
        [Case("c1", "say yes", expected="yes", metadata={"tags": {"a", "b"}})],
        [Includes()],
        store=bus,
        eval_id="ev",
    ).run()
    again = Counting()
    changed = Case("c1", "say yes", expected="yes", metadata={"tags": {"a", "c"}})
    await Eval(again.agent, [changed], [Includes()], store=bus, eval_id="ev").run()
    assert again.calls == Counter({"say yes": 1})
