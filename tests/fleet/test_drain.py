"""`StepBoundary`: a drain fires the run's token between steps only."""

from __future__ import annotations

from tiller.cancel import CancellationToken
from tiller.events import StepFinishedEvent, StepStartedEvent
from tiller.fleet import StepBoundary


def test_a_drain_between_steps_fires_at_once() -> None:
    token = CancellationToken()
    boundary = StepBoundary(token)
    boundary(StepStartedEvent("step 1"))
    boundary(StepFinishedEvent("step 1"))
    boundary.drain()
    assert token.is_cancelled and boundary.drained


def test_a_drain_mid_step_waits_for_its_end_not_a_subagents() -> None:
    token = CancellationToken()
    boundary = StepBoundary(token)
    boundary(StepStartedEvent("step 1"))
    boundary.drain()
    assert not token.is_cancelled
    boundary(StepStartedEvent("step 1", subagent_run_id="child"))
    boundary(StepFinishedEvent("step 1", subagent_run_id="child"))
    assert not token.is_cancelled  # the subagent's step ended, not the run's
    boundary(StepFinishedEvent("step 1"))
    assert token.is_cancelled and boundary.drained


def test_a_continued_runs_resumed_batch_counts_as_a_step() -> None:
    token = CancellationToken()
    boundary = StepBoundary(token, resuming=True)
    boundary.drain()
    assert not token.is_cancelled  # the approved calls are running
    boundary(StepStartedEvent("step 3"))
    assert token.is_cancelled


def test_someone_elses_cancel_is_not_a_drain() -> None:
    token = CancellationToken()
    boundary = StepBoundary(token)
    token.cancel("by the user")
    boundary.drain()
    assert not boundary.drained and token.reason == "by the user"
