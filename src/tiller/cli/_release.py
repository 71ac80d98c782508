"""The gate again, for a draft a person releases from the outbox (`tiller outbox send`).

Edited arguments are a new call: they pass the whole gate again — the interlock, the
run's pre_tool hooks, the policy engine (destructive is still denied) — and the
person's release replaces only the approver (DESIGN §3, issue: edited arguments). The
interlock's block on a send after private data met untrusted input is exactly what a
person's release answers: the person saw the draft (and the warning `tiller outbox send`
prints for such a draft) and chose to send it.

The rules and hooks are those the run pinned when it started (law 11: `pinned`, from its
checkpoint), never the workspace's `tiller.toml`, which the model may have written; a run
whose checkpoint is gone or pinned nothing is checked with the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..pinned_policy import PinnedPolicy
from ..policy import PolicyEngine
from ..store import OutboxItem
from ..tools import SafetyMode

__all__ = ["release_check"]


async def release_check(
    item: OutboxItem,
    tool: Any,
    arguments: dict[str, Any],
    *,
    pinned: Mapping[str, Any] | None = None,
) -> str | None:
    """None if the released draft may run, else the refusal (who refused, and why).
    `pinned` is the run's pinned policy record (`RunState.policy["pinned"]`)."""
    workspace = Path(item.workspace) if item.workspace is not None else None
    policy = PinnedPolicy.from_data(pinned) if pinned is not None else PinnedPolicy()
    if workspace is not None:
        policy = policy.for_workspace(workspace)
    config = policy.config
    engine = PolicyEngine(
        config.rules if config is not None else None,
        workspace=workspace,
    )
    # A person released it: every Ask is answered, only a Deny still refuses.
    decision = engine.decide(item.tool, arguments, tool, SafetyMode.FULL_ACCESS)
    if decision.kind == "deny":
        return f"Blocked by policy: {decision.reason} (risk: {decision.risk.value})"
    if config is not None and config.hooks.watches("pre_tool", item.tool):
        outcome = await config.hooks.pre_tool(
            tool=item.tool,
            arguments=arguments,
            call_id=item.call_id,
            run_id=item.run_id,
            thread_id=item.thread_id,
            workspace=workspace or Path.cwd(),
            taint=item.taint,
            risk=decision.risk,
        )
        if not outcome.allowed:
            return f"Refused by hook {outcome.hook}: {outcome.reason}"
    return None
