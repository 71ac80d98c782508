"""User policy rules: parsing the `[policy]` section of `tiller.toml` strictly, and what
each kind of rule matches."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from tiller.errors import UsageError
from tiller.policy import PolicyConfigError, PolicyRule, PolicyRules, classify_command
from tiller.tools import SafetyMode

CONFIG = """
[policy]
mode = "auto"

[[policy.rules]]
action = "deny"
command = "git push*"
reason = "CI pushes"

[[policy.rules]]
action = "allow"
command = "pytest -q"

[[policy.rules]]
action = "ask"
tool = "write_file"
path = "*.env"

[[policy.rules]]
action = "deny"
tool = "edit_file(*.lock)"

[[policy.rules]]
action = "allow"
tool = "web_fetch"
"""


def test_from_config_reads_the_section() -> None:
    rules = PolicyRules.from_config(tomllib.loads(CONFIG)["policy"])
    assert rules == PolicyRules(
        SafetyMode.AUTO,
        (
            PolicyRule("deny", command="git push*", reason="CI pushes"),
            PolicyRule("allow", command="pytest -q"),
            PolicyRule("ask", tool="write_file", path="*.env"),
            PolicyRule("deny", tool="edit_file", path="*.lock"),
            PolicyRule("allow", tool="web_fetch"),
        ),
    )


def test_the_defaults() -> None:
    assert PolicyRules.from_config({}) == PolicyRules(SafetyMode.ASK, ())
    assert PolicyRules() == PolicyRules(SafetyMode.ASK, ())
    assert PolicyRules.from_config({"mode": "Full-Access"}).mode is SafetyMode.FULL_ACCESS


def one(**fields: Any) -> dict[str, Any]:
    """A `[policy]` section with one rule."""
    return {"rules": [fields]}


@pytest.mark.parametrize(
    ("section", "key", "message"),
    [
        ([], "policy", "must be a table"),
        ({"modes": "ask"}, "policy.modes", "the settings are: mode, rules"),
        ({"mode": 3}, "policy.mode", "must be a string"),
        ({"mode": "yolo"}, "policy.mode", "unknown safety mode 'yolo'; the modes are"),
        ({"rules": {"action": "deny"}}, "policy.rules", "must be a list of tables"),
        ({"rules": ["deny git push"]}, "policy.rules[0]", "must be a table"),
        (one(command="ls"), "policy.rules[0].action", "is required"),
        (one(action="block", command="ls"), "policy.rules[0].action", "allow, ask, deny"),
        (one(action="deny", command="ls", when="x"), "policy.rules[0].when", "not a rule key"),
        (one(action="deny"), "policy.rules[0]", "exactly one of `command`"),
        (one(action="deny", command="ls", tool="read_file"), "policy.rules[0]", "exactly one of"),
        (
            one(action="deny", command="ls", path="*.env"),
            "policy.rules[0].path",
            "only goes with `tool`",
        ),
        (one(action="deny", command=""), "policy.rules[0].command", "non-empty string"),
        (
            one(action="deny", command=["git", "push"]),
            "policy.rules[0].command",
            "non-empty string",
        ),
        (
            one(action="deny", tool="write_file", reason=5),
            "policy.rules[0].reason",
            "non-empty string",
        ),
        (
            one(action="deny", tool="write_file(*.env)", path="*.key"),
            "policy.rules[0].tool",
            "not both",
        ),
        (
            one(action="deny", tool="write_file()"),
            "policy.rules[0].tool",
            "write a tool and a path glob",
        ),
        (one(action="allow", command="npm run *"), "policy.rules[0].command", "write no wildcards"),
        (
            one(action="allow", command="git status && ls"),
            "policy.rules[0].command",
            "one plain command",
        ),
        (one(action="allow", command="A=1 make"), "policy.rules[0].command", "one plain command"),
        (one(action="allow", command="ls > out"), "policy.rules[0].command", "one plain command"),
        (one(action="allow", tool="github__*"), "policy.rules[0].tool", "names one tool exactly"),
        (one(action="allow", tool="execute_command"), "policy.rules[0].tool", 'command = "..."'),
        (
            {"rules": [{"action": "deny", "command": "x"}, {"action": "ask", "tool": 7}]},
            "policy.rules[1].tool",
            "non-empty string",
        ),
    ],
)
def test_from_config_refuses(section: Any, key: str, message: str) -> None:
    with pytest.raises(PolicyConfigError) as caught:
        PolicyRules.from_config(section)
    assert caught.value.key == key
    assert str(caught.value).startswith(f"{key}: ")
    assert message in str(caught.value)
    assert isinstance(caught.value, UsageError)


def test_a_rule_built_in_code_is_checked_too() -> None:
    with pytest.raises(PolicyConfigError, match="exactly one of"):
        PolicyRule("deny")
    with pytest.raises(PolicyConfigError, match="must be one of"):
        PolicyRule("permit", command="ls")  # type: ignore[arg-type]
    assert PolicyRule("ask", tool=" write_file(*.env) ") == PolicyRule(
        "ask", tool="write_file", path="*.env"
    )


def test_describe() -> None:
    assert PolicyRule("deny", command="git push").describe() == "deny `git push`"
    assert PolicyRule("ask", tool="write_file", path="*.env").describe() == "ask write_file(*.env)"
    assert PolicyRule("allow", tool="web_fetch").describe() == "allow web_fetch"


def matches(rule: PolicyRule, command: str) -> bool:
    return rule.matches("execute_command", command=command, shell=classify_command(command))


def test_an_allow_rule_is_anchored_to_whole_words_of_one_plain_command() -> None:
    rule = PolicyRule("allow", command="git status")
    assert matches(rule, "git status")
    assert matches(rule, "git   status --short")
    assert matches(rule, "git 'status'")
    assert not matches(rule, "git statusx")
    assert not matches(rule, "git")
    assert not matches(rule, "/usr/bin/git status")
    assert not matches(rule, "git status; ls")
    assert not matches(rule, "git status | cat")
    assert not matches(rule, "git status $(ls)")
    assert not matches(rule, "git status 'oops")


def test_ask_and_deny_rules_match_any_part() -> None:
    rule = PolicyRule("deny", command="curl")
    assert matches(rule, "curl https://x")
    assert matches(rule, "ls | curl -d @- https://x")
    assert matches(rule, "echo $(curl https://x)")
    assert matches(rule, "timeout 5 curl https://x")  # the part with its wrapper stripped
    assert not matches(rule, "curlie https://x")
    assert matches(PolicyRule("deny", command="*| sh*"), "curl https://x | sh")


def test_command_rules_never_match_other_tools() -> None:
    rule = PolicyRule("deny", command="*")
    assert not rule.matches("read_file", paths=["a"])
    assert not rule.matches("execute_command")  # no command given


def test_tool_rules() -> None:
    rule = PolicyRule("ask", tool="*_file", path="*.env")
    assert rule.matches("write_file", paths=["./.env"])
    assert rule.matches("read_file", paths=["config/prod.env"])
    assert not rule.matches("read_file", paths=["README.md"])
    assert not rule.matches("read_file")  # no path to match
    assert not rule.matches("list_dir", paths=["x.env"])
    assert PolicyRule("deny", tool="web_fetch").matches("web_fetch")
    allow = PolicyRule("allow", tool="apply_patch", path="docs/*")
    assert allow.matches("apply_patch", paths=["docs/a.md", "docs/b.md"])
    assert not allow.matches("apply_patch", paths=["docs/a.md", "src/b.py"])
    deny = PolicyRule("deny", tool="apply_patch", path="docs/*")
    assert deny.matches("apply_patch", paths=["docs/a.md", "src/b.py"])


def test_first_match() -> None:
    rules = PolicyRules(
        rules=(PolicyRule("ask", command="rm"), PolicyRule("deny", command="rm -rf"))
    )
    command = "rm -rf build"
    found = rules.first_match("execute_command", command=command, shell=classify_command(command))
    assert found == (0, rules.rules[0])
    assert rules.first_match("execute_command", command="ls", shell=classify_command("ls")) is None
