"""`Agent.run` without a workspace: its scratch directory is made only when a tool needs it.

Making and removing a directory costs more than a whole short run, and most runs never
touch a workspace: a function tool that is not given its `ExecContext` cannot reach one.
"""

from __future__ import annotations

import stat
import tempfile
import uuid
from pathlib import Path

import pytest

from tiller import Agent, AllowAll, ScriptedModel, StopCause, tool
from tiller.errors import UsageError
from tiller.loop import RunContext
from tiller.policy import HookSet, ShellHook
from tiller.tools import ExecContext, Jail, SafetyMode


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system temporary directory, for this test only, so what a run leaves (or
    makes while it runs) can be listed."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _left(root: Path) -> list[Path]:
    """What is in `root` now (a helper, so the async tests do no path work themselves)."""
    return list(root.iterdir())


def _real(path: Path) -> Path:
    return path.resolve()


def _call(name: str, **arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def test_a_run_without_tools_makes_no_directory(temp_root: Path) -> None:
    during: list[list[Path]] = []
    result = await Agent(ScriptedModel(["hello"])).run(
        "hi", on_event=lambda event: during.append(list(temp_root.iterdir()))
    )
    assert (result.text, result.stop_cause) == ("hello", StopCause.COMPLETED)
    assert during and all(listing == [] for listing in during)
    assert _left(temp_root) == []


async def test_a_tool_not_given_its_context_makes_no_directory(temp_root: Path) -> None:
    seen: list[list[Path]] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        seen.append(list(temp_root.iterdir()))
        return a + b

    model = ScriptedModel([_call("add", a=2, b=3), _call("add", a=1, b=1), "done"])
    result = await Agent(model, [add]).run("sum", approver=AllowAll())
    assert result.stop_cause is StopCause.COMPLETED
    assert [entry.name for entry in result.tool_trace] == ["add", "add"]
    assert seen == [[], []], "nothing was made while the calls ran"
    assert _left(temp_root) == []


async def test_a_tool_given_its_context_gets_the_workspace(temp_root: Path) -> None:
    during: list[tuple[Path, bool, int]] = []

    @tool
    def write_note(text: str, ctx: ExecContext) -> str:
        """Write a note into the workspace."""
        (ctx.workdir / "note.txt").write_text(text, encoding="utf-8")
        mode = stat.S_IMODE(ctx.workdir.stat().st_mode)
        during.append((ctx.workdir, (ctx.workdir / "note.txt").is_file(), mode))
        return "written"

    model = ScriptedModel([_call("write_note", text="hi"), "done"])
    result = await Agent(model, [write_note]).run("note", approver=AllowAll())
    assert result.stop_cause is StopCause.COMPLETED
    [(workdir, written, mode)] = during
    assert written and workdir.parent == _real(temp_root)
    assert mode == 0o700, "private, as tempfile.mkdtemp makes it"
    assert _left(temp_root) == [], "removed when the run ended"


async def test_an_oversized_result_still_spills_into_the_scratch_workspace(
    temp_root: Path,
) -> None:
    spilled: list[bool] = []

    @tool
    def big() -> str:
        """Return a lot of text."""
        return "x" * 100_000

    @tool
    def look(ctx: ExecContext) -> str:
        """Look at the spill directory."""
        spilled.append(any((ctx.workdir / ".tiller" / "spill").iterdir()))
        return "looked"

    model = ScriptedModel([_call("big"), _call("look"), "done"])
    result = await Agent(model, [big, look]).run("go", approver=AllowAll())
    assert result.stop_cause is StopCause.COMPLETED
    content = result.state.messages[2].tool_results[0].content
    assert "bytes more in .tiller/spill/" in content, content[-200:]
    assert spilled == [True]
    assert _left(temp_root) == []


def test_a_scratch_jail_makes_its_root_once_for_all_its_copies(temp_root: Path) -> None:
    jail = Jail.scratch()
    copy = jail.with_shell_timeout(5).with_safety_mode(SafetyMode.AUTO)
    assert jail.root_pending and copy.root_pending
    assert not jail.root.exists() and copy.root == jail.root
    assert copy.materialize() == jail.root
    assert jail.root.is_dir() and not jail.root_pending
    assert jail.materialize() == jail.root  # once: nothing more to make
    assert not Jail(temp_root).root_pending


def test_a_scratch_jail_refuses_a_directory_someone_else_made(temp_root: Path) -> None:
    jail = Jail.scratch()
    jail.root.mkdir()
    with pytest.raises(UsageError, match="already exists and was not made by this run"):
        jail.materialize()
    assert jail.root_pending


def _fixed_scratch_name(monkeypatch: pytest.MonkeyPatch) -> str:
    """Scratch roots get this name, so a test can stand where another user would."""
    fixed = uuid.UUID(int=0x5C)
    monkeypatch.setattr(uuid, "uuid4", lambda: fixed)
    return f"tiller-{fixed.hex}"


async def test_a_run_leaves_alone_a_directory_it_never_made(
    temp_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Someone else's directory at the scratch path (a shared /tmp): the run never made
    # its root, so when it ends it has nothing of its own there to remove.
    theirs = temp_root / _fixed_scratch_name(monkeypatch)
    theirs.mkdir()
    (theirs / "keep.txt").write_text("not the run's", encoding="utf-8")
    result = await Agent(ScriptedModel(["hello"])).run("hi")
    assert result.stop_cause is StopCause.COMPLETED
    assert (theirs / "keep.txt").read_text(encoding="utf-8") == "not the run's"


async def test_a_run_that_refused_a_planted_directory_leaves_it(
    temp_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = temp_root / _fixed_scratch_name(monkeypatch)
    theirs.mkdir()
    (theirs / "keep.txt").write_text("not the run's", encoding="utf-8")

    @tool
    def look(ctx: ExecContext) -> str:
        """Look at the workspace."""
        return ", ".join(sorted(path.name for path in ctx.workdir.iterdir()))

    model = ScriptedModel([_call("look"), "done"])
    result = await Agent(model, [look]).run("look", approver=AllowAll())
    # The call that needed the workspace failed, saying why; nothing of theirs was read.
    (answer,) = [r for m in result.state.messages for r in getattr(m, "tool_results", ())]
    assert answer.is_error and "already exists and was not made by this run" in answer.content
    assert "keep.txt" not in str(result.state.messages)
    assert (theirs / "keep.txt").read_text(encoding="utf-8") == "not the run's"


def test_a_removed_scratch_jail_makes_no_root_again(temp_root: Path) -> None:
    made = Jail.scratch()
    made.materialize()
    (made.root / "file.txt").write_text("x", encoding="utf-8")
    made.remove_scratch()
    assert _left(temp_root) == []
    never = Jail.scratch()
    never.remove_scratch()
    with pytest.raises(UsageError, match="removed"):
        never.materialize()  # a thread left behind by the run cannot make it now
    assert _left(temp_root) == []
    Jail(temp_root).remove_scratch()  # not a scratch jail: nothing to remove
    assert temp_root.is_dir()


async def test_a_scratch_jail_s_hooks_run_in_its_workspace(temp_root: Path) -> None:
    # A shell hook runs with the workspace as its directory: under a scratch jail whose
    # root was not made yet, bash could not start there, and the hook refused every call.
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    seen = temp_root / "seen"
    hook = ShellHook(f"pwd >> {seen}")
    jail = Jail.scratch()
    ctx = RunContext(
        jail=jail, approver=AllowAll(), hooks=HookSet(pre_tool=[hook], post_tool=[hook])
    )
    model = ScriptedModel([_call("add", a=2, b=3), "done"])
    try:
        result = await Agent(model, [add]).run_in(ctx, "sum")
        assert result.stop_cause is StopCause.COMPLETED
        content = result.state.messages[2].tool_results[0].content
        assert content == "5", content
        assert seen.read_text(encoding="utf-8").split() == [str(jail.root)] * 2
    finally:
        jail.remove_scratch()
    assert _left(temp_root) == [seen]


async def test_a_scratch_jail_s_session_end_hook_runs_in_its_workspace(temp_root: Path) -> None:
    seen = temp_root / "seen"
    jail = Jail.scratch()
    ctx = RunContext(
        jail=jail, approver=AllowAll(), hooks=HookSet(session_end=[ShellHook(f"pwd > {seen}")])
    )
    try:
        result = await Agent(ScriptedModel(["hello"])).run_in(ctx, "hi")
        assert result.stop_cause is StopCause.COMPLETED
        assert seen.read_text(encoding="utf-8").split() == [str(jail.root)]
    finally:
        jail.remove_scratch()
    assert _left(temp_root) == [seen]
