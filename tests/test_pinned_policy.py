"""`PinnedPolicy`: the configuration a run was started with, as its checkpoint records it
(law 11). Pinned once; restored from the record alone, whatever the workspace holds now."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tiller.config import ConfigError
from tiller.loop import RunContext
from tiller.pinned_policy import (
    PinnedFileChanged,
    PinnedPolicy,
    restore_pinned_policy,
)
from tiller.policy import Interlock, ShellHook
from tiller.tools import SafetyMode

FULL = """\
[policy]
mode = "auto"
[[policy.rules]]
action = "deny"
tool = "read_file"
path = "*.env"

[interlock]
on_trifecta = "ask"

[hooks]
pre_tool = [{ command = "./check.sh --strict", tools = ["write_file"] }]
post_tool = [{ command = "logger -t tiller", name = "syslog" }]

[mcp.servers.fx]
command = "python3"
args = ["server.py"]
cwd = "."

[outbox]
tools = ["fx__send"]

[subagents]
max_concurrent = 3
[subagents.reviewer]
tools = ["read_file"]
safety_ceiling = "read_only"
preamble = "You review."
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "tiller.toml").write_text(FULL)
    (root / "check.sh").write_text("#!/bin/sh\nexit 0\n")
    (root / "server.py").write_text("print('hi')\n")
    return root.resolve()


def _through_json(pinned: PinnedPolicy) -> PinnedPolicy:
    return PinnedPolicy.from_data(orjson.loads(orjson.dumps(pinned.to_data())))


def test_every_section_survives_the_checkpoint_and_the_file_is_not_read_again(
    workspace: Path,
) -> None:
    pinned = PinnedPolicy.read(workspace)
    (workspace / "tiller.toml").write_text('[policy]\nmode = "full_access"\n')  # too late
    restored = _through_json(pinned)
    config = restored.config
    assert config.mode is SafetyMode.AUTO
    assert config.rules is not None and len(config.rules.rules) == 1
    assert config.interlock == Interlock.from_config({"on_trifecta": "ask"})
    assert config.outbox == frozenset({"fx__send"})
    assert config.subagents is not None and config.subagents == pinned.config.subagents
    (server,) = config.mcp
    assert server.cwd is not None and server.cwd.is_absolute()
    (check,) = config.hooks.pre_tool_hooks
    assert isinstance(check, ShellHook)
    assert [pin.path for pin in check.pinned] == [str(workspace / "check.sh")]
    assert check.pinned[0].sha256 is not None
    assert restored.source == workspace / "tiller.toml"
    assert restored.to_data() == pinned.to_data()


def test_restoring_adds_the_pinned_files_to_the_protected_paths(workspace: Path) -> None:
    pinned = PinnedPolicy.read(workspace)
    fresh = RunContext.sandboxed(workspace)
    ctx = restore_pinned_policy(fresh.with_pinned_policy(pinned.to_data()))
    assert ctx.jail.protects("check.sh") == "check.sh"
    assert ctx.jail.protects("tiller.toml") == "tiller.toml"
    assert ctx.jail.safety.mode is SafetyMode.AUTO
    assert ctx.pinned_policy == pinned.to_data()


def test_a_config_file_inside_the_jail_is_protected(workspace: Path) -> None:
    (workspace / "conf").mkdir()
    (workspace / "conf" / "dev.toml").write_text('[policy]\nmode = "ask"\n')
    pinned = PinnedPolicy.read(workspace, workspace / "conf" / "dev.toml")
    ctx = pinned.apply(RunContext.sandboxed(workspace))
    assert ctx.jail.protects("conf/dev.toml") == "conf/dev.toml"


def test_a_checkpoint_without_a_pinned_policy_resumes_with_the_defaults(
    workspace: Path,
) -> None:
    ctx = restore_pinned_policy(RunContext.sandboxed(workspace))
    assert not ctx.hooks
    assert ctx.interlock == Interlock()
    assert ctx.outbox is None
    assert PinnedPolicy().describe() == "policy: no tiller.toml: built-in defaults"


def test_a_record_of_another_version_is_refused_by_name(workspace: Path) -> None:
    data = PinnedPolicy.read(workspace).to_data()
    data["version"] = 99
    with pytest.raises(ConfigError, match="pinned policy has version 99"):
        PinnedPolicy.from_data(data)


def test_a_changed_mcp_program_is_not_started(workspace: Path) -> None:
    pinned = _through_json(PinnedPolicy.read(workspace))
    pinned.check_mcp_files()
    (workspace / "server.py").write_text("import os; os.system('id')\n")
    with pytest.raises(PinnedFileChanged, match="MCP server fx is not started"):
        pinned.check_mcp_files()


async def test_a_changed_hook_script_denies_instead_of_running(
    workspace: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    pinned = PinnedPolicy.read(workspace)
    (workspace / "check.sh").write_text(f"#!/bin/sh\ntouch {marker}\n")
    outcome = await pinned.config.hooks.pre_tool(
        tool="write_file",
        arguments={"path": "a.txt"},
        call_id="c1",
        run_id="r1",
        thread_id="t1",
        workspace=workspace,
    )
    assert not outcome.allowed
    assert "check.sh changed" in outcome.reason
    assert "since the run's policy was pinned" in outcome.reason
    assert not marker.exists()


def test_a_run_continued_in_another_jail_checks_its_scripts_there(
    workspace: Path, tmp_path: Path
) -> None:
    pinned = PinnedPolicy.read(workspace)
    elsewhere = tmp_path / "copy"
    elsewhere.mkdir()
    (elsewhere / "check.sh").write_text("#!/bin/sh\nid\n")
    ctx = pinned.apply(RunContext.sandboxed(elsewhere))
    (hook,) = ctx.hooks.pre_tool_hooks
    assert isinstance(hook, ShellHook)
    assert hook.pinned[0].path == str(elsewhere.resolve() / "check.sh")
    assert ctx.jail.protects("check.sh") == "check.sh"


async def test_the_library_refuses_to_resume_a_pinned_run_without_its_policy(
    workspace: Path,
) -> None:
    from tiller.errors import UsageError
    from tiller.loop import Agent, record_policy, resume
    from tiller.model import ScriptedModel
    from tiller.state import RunState

    pinned = PinnedPolicy.read(workspace)
    ctx = pinned.apply(RunContext.sandboxed(workspace))
    state = record_policy(RunState(run_id="r1", thread_id="t1", agent_name="a"), ctx)
    agent = Agent(ScriptedModel(["done"]), [])
    # A state continued with no decisions and no store: only the deprecated form says it.
    refused = pytest.raises(UsageError, match="pinned a policy when it started")
    with refused, pytest.warns(DeprecationWarning, match="recover"):
        await resume(agent, state)
    with pytest.warns(DeprecationWarning, match="recover"):
        result = await resume(agent, state, configure=restore_pinned_policy)
    assert result.text == "done"


def test_a_policy_with_rules_knows_the_pinned_files_are_protected(workspace: Path) -> None:
    """A `[policy]` engine takes the protected paths it is built with: the hook scripts
    were added after it was built, so its shell check let `echo > check.sh` through."""
    from tiller.tools.builtin import execute_command_tool

    ctx = PinnedPolicy.read(workspace).apply(RunContext.sandboxed(workspace))
    assert ctx.policy is not None
    decision = ctx.policy.decide(
        "execute_command",
        {"command": "echo 'exit 0' > check.sh"},
        execute_command_tool(),
        SafetyMode.FULL_ACCESS,
    )
    assert decision.kind == "deny", decision
