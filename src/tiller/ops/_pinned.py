"""The policy a run pinned when it started, and the agent that continues it elsewhere.

The run's policy was pinned when it started (`tiller.pinned_policy`), from where the model
cannot write, and every resume, approval and served request uses it unchanged (law 11).
Its MCP servers are live processes, not data, so each process that continues the run
starts the same servers again: an approved MCP call then runs, instead of coming back as
an unknown tool.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from ..loop import Agent, jail_root_of, load_agent
from ..pinned_policy import PinnedPolicy
from ..state import RunState
from ..store import DEFAULT_BUCKET, Bus, CheckpointStore
from ..tools.mcp import open_mcp_tools

__all__ = ["pinned_agent", "pinned_policy_of"]


def pinned_policy_of(state: RunState) -> PinnedPolicy:
    """The policy `state`'s run pinned when it started (the defaults if none: law 3)."""
    data = (state.policy or {}).get("pinned")
    return PinnedPolicy.from_data(data) if data is not None else PinnedPolicy()


@contextlib.asynccontextmanager
async def pinned_agent(
    store: Bus, run_id: str, agent: str | None, *, bucket: str = DEFAULT_BUCKET
) -> AsyncIterator[Agent | str | None]:
    """What continues the run as its agent: `agent` unchanged when the run's pinned policy
    has no MCP servers; else the agent loaded (from `agent` or the checkpoint's reference)
    with the pinned servers' tools added, the servers stopped on exit."""
    state = (await CheckpointStore(store, bucket).load(run_id)).state
    pinned = pinned_policy_of(state)
    ref = agent if agent is not None else state.agent_ref
    if not pinned.config.mcp or ref is None:
        yield agent  # the resume says what is missing, if anything
        return
    loaded = load_agent(ref, model=state.model_spec, outside=jail_root_of(state))
    pinned.check_mcp_files()
    async with open_mcp_tools(pinned.config.mcp) as tools:
        for each in tools:
            if each.name not in loaded.registry:
                loaded.registry.add(each)
        yield loaded
