"""The gate blocks a write to protected policy in every mode, before any hook runs or any
person is asked, and says who refused (laws 4 and 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller.loop import Agent, RunContext
from tiller.model import ScriptedModel
from tiller.policy import AllowAll, HookSet, HookVerdict
from tiller.tools import SafetyMode
from tiller.tools.builtin import apply_patch, write_file

from ._support import drive

PATCH = """\
--- /dev/null
+++ b/.git/hooks/post-checkout
@@ -0,0 +1,2 @@
+#!/bin/sh
+id
"""


@pytest.mark.parametrize("mode", list(SafetyMode))
async def test_a_write_to_the_policy_file_is_blocked_by_policy_in_every_mode(
    workspace: Path, mode: SafetyMode
) -> None:
    (workspace / "tiller.toml").write_text('[policy]\nmode = "ask"\n')
    seen: list[str] = []

    def hook(event: object) -> HookVerdict:
        seen.append("ran")
        return HookVerdict.allow()

    ctx = RunContext.sandboxed(workspace, AllowAll()).with_hooks(HookSet(pre_tool=[hook]))
    ctx.jail.safety.set(mode)
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {
                        "name": "write_file",
                        "arguments": {"path": "./tiller.toml", "content": "[hooks]\n"},
                    },
                    {"name": "apply_patch", "arguments": {"patch": PATCH}},
                ]
            },
            "Left the policy alone.",
        ]
    )
    run = await drive(Agent(model, [write_file, apply_patch]), "take over", ctx)
    results = {r.name: r for r in run.results()}
    if mode is SafetyMode.READ_ONLY:
        # read_only refuses every write already, by its own rule.
        assert all(r.is_error for r in results.values())
    else:
        assert results["write_file"].content.startswith(
            "Blocked by policy: `./tiller.toml` is protected policy (covered by `tiller.toml`)"
        )
        assert "a person edits it between runs" in results["write_file"].content
        assert results["apply_patch"].content.startswith(
            "Blocked by policy: `.git/hooks/post-checkout` is protected policy"
        )
        assert [e.refused_by for e in run.result.tool_trace] == ["policy", "policy"]
    assert seen == []  # no hook was asked about a write no mode allows
    assert (workspace / "tiller.toml").read_text() == '[policy]\nmode = "ask"\n'
    assert not (workspace / ".git").exists()
