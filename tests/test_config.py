"""`tiller.toml`: every section parsed by its owner, applied to a run's context, and every
mistake a `ConfigError` naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller.config import ConfigError, TillerConfig, find_config, load_config
from tiller.loop import RunContext
from tiller.policy import HookSet, Interlock
from tiller.tools import SafetyMode
from tiller.tools.builtin import write_file

FULL = """
[policy]
mode = "auto"
[[policy.rules]]
action = "allow"
command = "pytest"
[[policy.rules]]
action = "deny"
tool = "write_file"
path = "*.env"

[interlock]
on_trifecta = "ask"

[hooks]
pre_tool = [{ command = "exit 0", name = "ok", tools = ["execute_command"] }]

[mcp.servers.files]
command = "files-mcp"
args = ["--stdio"]

[outbox]
tools = ["files__send"]
"""


def test_a_full_file_is_parsed_and_applied(tmp_path: Path) -> None:
    (tmp_path / "tiller.toml").write_text(FULL)
    config = find_config(tmp_path)
    assert config.path == tmp_path / "tiller.toml"
    assert config.mode is SafetyMode.AUTO
    assert config.rules is not None and len(config.rules.rules) == 2
    assert config.interlock == Interlock(on_trifecta="ask")
    assert config.hooks.watches("pre_tool", "execute_command")
    assert [server.name for server in config.mcp.servers] == ["files"]
    assert config.outbox == frozenset({"files__send"})

    ctx = config.apply(RunContext.sandboxed(tmp_path / "ws"))
    assert ctx.jail.safety.mode is SafetyMode.AUTO
    assert ctx.interlock.on_trifecta == "ask"
    assert ctx.outbox is not None and ctx.outbox.routes("files__send")
    assert ctx.policy is not None
    decision = ctx.policy.decide(
        "write_file", {"path": "prod.env", "content": ""}, write_file, SafetyMode.FULL_ACCESS
    )
    assert decision.kind == "deny"


def test_no_file_means_the_defaults(tmp_path: Path) -> None:
    config = find_config(tmp_path)
    assert config == TillerConfig()
    ctx = config.apply(RunContext.sandboxed(tmp_path))
    assert ctx.jail.safety.mode is SafetyMode.ASK and not ctx.hooks and ctx.outbox is None


def test_hooks_from_code_are_kept(tmp_path: Path) -> None:
    (tmp_path / "tiller.toml").write_text('[hooks]\npre_tool = [{ command = "exit 0" }]\n')
    mine = HookSet(pre_tool=[lambda event: None])
    ctx = find_config(tmp_path).apply(RunContext.sandboxed(tmp_path).with_hooks(mine))
    assert len(ctx.hooks.pre_tool_hooks) == 2


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[polcy]\nmode = 'ask'\n", "unknown section(s) polcy"),
        ("[policy]\nmode = 'yolo'\n", "yolo"),
        ("[interlock]\non_trifecta = 'maybe'\n", "on_trifecta"),
        ("[outbox]\ntools = 'send'\n", "[outbox] tools must be a list"),
        ("[hooks]\npre_tool = [{ timeout = 1 }]\n", "hooks.pre_tool[0]"),
        ("[mcp.servers.x]\nargs = []\n", "command"),
        ("this is not toml", "not valid TOML"),
    ],
)
def test_mistakes_name_the_file_and_the_key(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "tiller.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"tiller\.toml") as caught:
        load_config(path)
    assert says in str(caught.value)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")
