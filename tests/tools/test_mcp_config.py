"""MCP configuration, tool naming and argument checks: the parts of the MCP tool source
that need no server (`test_mcp.py` runs a real one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tiller.tools.mcp
from tiller import InvalidToolArguments, TillerError, UsageError
from tiller.tools import ToolError
from tiller.tools.mcp import (
    McpConfigError,
    McpServerConfig,
    McpServers,
    McpStartError,
    mcp_tool_name,
)
from tiller.tools.mcp._schema import ArgumentsCheck, InvalidSchema


def test_the_package_exports_are_sorted_and_complete() -> None:
    names = tiller.tools.mcp.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    for name in names:
        assert hasattr(tiller.tools.mcp, name)
    assert issubclass(McpStartError, TillerError)
    assert issubclass(McpConfigError, UsageError)


# ── configuration ───────────────────────────────────────────────────────────────────


def test_config_parses_the_mcp_table(tmp_path: Path) -> None:
    servers = McpServers.from_config(
        {
            "servers": {
                "github": {
                    "command": "npx",
                    "args": ["-y", "server-github"],
                    "env": {"TOKEN": "secret"},
                    "cwd": "tools",
                    "timeout": 5,
                    "startup_timeout": 2.5,
                },
                "files-2": {"command": "/usr/bin/files"},
            }
        },
        base_dir=tmp_path,
    )
    assert servers.names() == ["github", "files-2"]
    github = servers.get("github")
    assert github == McpServerConfig(
        "github",
        "npx",
        ("-y", "server-github"),
        {"TOKEN": "secret"},
        tmp_path / "tools",
        5.0,
        2.5,
    )
    files = servers.get("files-2")
    assert files is not None
    assert (files.args, dict(files.env), files.cwd) == ((), {}, None)
    assert (files.timeout, files.startup_timeout) == (60.0, 30.0)
    assert McpServers.from_config({}).servers == ()


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"server": {}}, "mcp.server"),
        ({"servers": ["x"]}, "mcp.servers"),
        ({"servers": {"a": "npx"}}, "mcp.servers.a"),
        ({"servers": {"a": {"args": []}}}, "mcp.servers.a.command"),
        ({"servers": {"a": {"command": "x", "comand": "y"}}}, "mcp.servers.a.comand"),
        ({"servers": {"a": {"command": ""}}}, "mcp.servers.a.command"),
        ({"servers": {"a": {"command": 3}}}, "mcp.servers.a.command"),
        ({"servers": {"a": {"command": "x", "args": "-v"}}}, "mcp.servers.a.args"),
        ({"servers": {"a": {"command": "x", "args": ["-v", 2]}}}, "mcp.servers.a.args"),
        ({"servers": {"a": {"command": "x", "env": ["A=1"]}}}, "mcp.servers.a.env"),
        ({"servers": {"a": {"command": "x", "env": {"A": 1}}}}, "mcp.servers.a.env.A"),
        ({"servers": {"a": {"command": "x", "env": {"A=B": "1"}}}}, "mcp.servers.a.env"),
        ({"servers": {"a": {"command": "x", "cwd": 1}}}, "mcp.servers.a.cwd"),
        ({"servers": {"a": {"command": "x", "timeout": 0}}}, "mcp.servers.a.timeout"),
        ({"servers": {"a": {"command": "x", "timeout": True}}}, "mcp.servers.a.timeout"),
        ({"servers": {"a": {"command": "x", "timeout": "5"}}}, "mcp.servers.a.timeout"),
        (
            {"servers": {"a": {"command": "x", "startup_timeout": float("inf")}}},
            "mcp.servers.a.startup_timeout",
        ),
        (
            {"servers": {"a": {"command": "x", "trust_annotations": "yes"}}},
            "mcp.servers.a.trust_annotations",
        ),
        ({"servers": {"a__b": {"command": "x"}}}, "mcp.servers.a__b"),
        ({"servers": {"_a": {"command": "x"}}}, "mcp.servers._a"),
        ({"servers": {"a_": {"command": "x"}}}, "mcp.servers.a_"),
        ({"servers": {"a.b": {"command": "x"}}}, "mcp.servers.a.b"),
        ({"servers": {"a" * 33: {"command": "x"}}}, f"mcp.servers.{'a' * 33}"),
    ],
)
def test_config_refuses_bad_entries(section: dict[str, Any], key: str) -> None:
    with pytest.raises(McpConfigError) as raised:
        McpServers.from_config(section)
    assert raised.value.key == key
    assert isinstance(raised.value, UsageError)


def test_trust_annotations_is_off_unless_the_user_turns_it_on() -> None:
    """A server's annotations can lower a tool's risk only where the user says so."""
    servers = McpServers.from_config(
        {"servers": {"a": {"command": "x"}, "b": {"command": "y", "trust_annotations": True}}}
    )
    assert [s.trust_annotations for s in servers] == [False, True]


def test_config_built_in_code_is_checked_too() -> None:
    with pytest.raises(McpConfigError, match="not a valid MCP server name"):
        McpServerConfig("two words", "x")
    with pytest.raises(McpConfigError, match="positive number"):
        McpServerConfig("a", "x", timeout=-1)
    with pytest.raises(McpConfigError, match="must be a list of strings"):
        McpServerConfig("a", "x", "-v")  # type: ignore[arg-type]
    with pytest.raises(McpConfigError, match="must be a mapping"):
        McpServerConfig("a", "x", env=["A=1"])  # type: ignore[arg-type]
    with pytest.raises(McpConfigError, match="configured twice"):
        McpServers((McpServerConfig("a", "x"), McpServerConfig("a", "y")))


def test_unknown_keys_are_listed_in_the_message() -> None:
    with pytest.raises(McpConfigError) as raised:
        McpServers.from_config({"servers": {"a": {"command": "x", "cmd": "y"}}})
    assert str(raised.value) == (
        "mcp.servers.a.cmd: unknown key; the keys of an MCP server are: "
        "args, command, cwd, env, startup_timeout, timeout, trust_annotations"
    )


# ── naming ──────────────────────────────────────────────────────────────────────────


def test_names_that_fit_are_kept_and_others_rewritten_deterministically() -> None:
    assert mcp_tool_name("github", "create_issue") == "github__create_issue"
    assert mcp_tool_name("fs", "read-file") == "fs__read-file"
    dotted = mcp_tool_name("fs", "a.b")
    assert dotted.startswith("fs__a_b_") and len(dotted) == len("fs__a_b_") + 8
    assert dotted == mcp_tool_name("fs", "a.b")  # stable
    assert dotted != mcp_tool_name("fs", "a_b") == "fs__a_b"
    assert mcp_tool_name("fs", "a/b") not in (dotted, "fs__a_b")
    long = mcp_tool_name("server", "x" * 100)
    assert len(long) == 64 and long.startswith("server__xxx")
    assert long != mcp_tool_name("server", "x" * 101)
    assert mcp_tool_name("s" * 32, "t" * 64).startswith("s" * 32 + "__")
    assert len(mcp_tool_name("s" * 32, "t" * 64)) == 64
    assert mcp_tool_name("fs", "").startswith("fs___")


def test_argument_checks_follow_json_schema() -> None:
    check = ArgumentsCheck(
        "t",
        {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1}, "tags": {"type": "array"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    )
    check.check({"n": 2, "tags": []})
    with pytest.raises(InvalidToolArguments) as raised:
        check.check({"n": 0, "tags": "x", "extra": 1})
    assert raised.value.detail == (
        "(the arguments): Additional properties are not allowed ('extra' was unexpected); "
        "n: 0 is less than the minimum of 1; tags: 'x' is not of type 'array'"
    )
    with pytest.raises(InvalidSchema, match="describes 'array', not an object"):
        ArgumentsCheck("t", {"type": "array"})
    dangling = ArgumentsCheck("t", {"type": "object", "properties": {"a": {"$ref": "#/$defs/no"}}})
    with pytest.raises(ToolError, match="cannot be checked"):
        dangling.check({"a": 1})
