"""The agent that continues a run in another process (`tiller approve`, `tiller deny`,
`tiller runs resume`), with the MCP servers of the run's pinned policy open.

The run's policy was pinned when it started (`tiller.pinned_policy`); the resume rebuilds
it from the checkpoint (`restore_pinned_policy`). Its MCP servers are live processes, not
data, so each process that continues the run starts the same servers again: an approved
MCP call then runs, instead of coming back as an unknown tool.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..loop import Agent
    from ..store import Bus

__all__ = ["pinned_agent"]


@contextlib.asynccontextmanager
async def pinned_agent(
    bus: Bus, bucket: str, run_id: str, agent: str | None
) -> AsyncIterator[Agent | str | None]:
    """What to pass to `resume` as the agent: `agent` unchanged when the run's pinned
    policy has no MCP servers; else the agent loaded (from `agent` or the checkpoint's
    reference) with the pinned servers' tools added, the servers stopped on exit."""
    from ..loop import load_agent
    from ..pinned_policy import PinnedPolicy
    from ..store import CheckpointStore
    from ..tools.mcp import open_mcp_tools

    state = (await CheckpointStore(bus, bucket).load(run_id)).state
    data = (state.policy or {}).get("pinned")
    pinned = PinnedPolicy.from_data(data) if data is not None else PinnedPolicy()
    ref = agent if agent is not None else state.agent_ref
    if not pinned.config.mcp or ref is None:
        yield agent  # `resume` says what is missing, if anything
        return
    loaded = load_agent(ref, model=state.model_spec)
    pinned.check_mcp_files()
    async with open_mcp_tools(pinned.config.mcp) as tools:
        for each in tools:
            if each.name not in loaded.registry:
                loaded.registry.add(each)
        yield loaded
