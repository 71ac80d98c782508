"""`tiller rewind RUN_ID --to INDEX`, on a SQLite store.

As in `test_runs_cli.py`, the command runs in this process through typer's runner, and the
run it acts on is set up with the library: a durable run's `RunState` in the checkpoint
store, and the file checkpoints its tools took before each write (what
`ExecContext.snapshot_before_write` records), with the workspace changed as the tools
changed it. The workspace is compared as a whole, byte for byte, with permission bits.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from typer.testing import CliRunner, Result

from tiller.cli import app
from tiller.conversation import AssistantMessage, ToolCall, ToolResult, UserMessage
from tiller.loop import RunContext, record_policy
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.store import FILE_BLOBS_BUCKET, Bus, CheckpointStore, FileCheckpoints, open_bus
from tiller.tools import CheckpointOrigin

from .cli_support import made_store

T = TypeVar("T")

RUN = "r-rw"
THREAD = "t-rw"
Tree = dict[str, tuple[str, bytes | str, int]]
BINARY = bytes(range(256)) * 32 + b"\x00\xff"

AGENT_MODULE = """
from tiller.loop import Agent
from tiller.model import ScriptedModel


def _answer(messages, info):
    return f"continued after {len(messages)} messages"


def build():
    return Agent(ScriptedModel(_answer), [], name="rewinder")
"""


@pytest.fixture
def agent_ref(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"rewind_agent_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:build"


@pytest.fixture
def url(tmp_path: Path) -> str:
    # There, empty: the reading commands refuse a SQLite store that is not there.
    return made_store(tmp_path / "store.db")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def on_store(url: str, work: Callable[[Bus], Coroutine[Any, Any, T]]) -> T:
    async def run() -> T:
        async with await open_bus(url) as bus:
            return await work(bus)

    return asyncio.run(run())


def tiller(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def tree(root: Path) -> Tree:
    found: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            info = path.lstat()
            rel = path.relative_to(root).as_posix()
            if stat.S_ISDIR(info.st_mode):
                found[rel] = ("dir", b"", stat.S_IMODE(info.st_mode))
            else:
                found[rel] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
    return found


def write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def call(call_id: str, name: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments="{}")


def result(call_id: str, name: str) -> ToolResult:
    return ToolResult(call_id=call_id, name=name, content="ok")


def durable_run(url: str, ws: Path, agent_ref: str | None = None) -> dict[str, Tree]:
    """A finished run of six messages whose tools changed the workspace in two batches:

    0 user "go" · 1 assistant: write notes.txt, delete gone.txt · 2 user: results ·
    3 assistant: overwrite data.bin, create new/dir/made.txt · 4 user: results ·
    5 assistant "done".

    Returns the workspace before each batch and at the end."""
    write(ws / "notes.txt", b"v0\n")
    write(ws / "data.bin", BINARY, 0o600)
    write(ws / "gone.txt", b"the run deletes me\n", 0o640)

    async def work(bus: Bus) -> dict[str, Tree]:
        files = FileCheckpoints(bus, run_id=RUN)
        ctx = RunContext.sandboxed(ws, AllowAll()).with_store(bus)
        state = RunState(run_id=RUN, thread_id=THREAD, messages=[UserMessage(text="go")])
        record_policy(state, ctx, agent_ref=agent_ref)
        trees = {"start": tree(ws)}

        # Each batch's calls are dispatched with the assistant message in the transcript:
        # they snapshot at its length, then write.
        first = (call("c1", "write_file"), call("c2", "delete_file"))
        state.messages.append(AssistantMessage(text="", tool_calls=first))
        origin = CheckpointOrigin(session_id=THREAD, message_index=len(state.messages))
        await files.snapshot(origin, ws, [ws / "notes.txt"], reason="write_file")
        write(ws / "notes.txt", b"v1 by the run\n")
        await files.snapshot(origin, ws, [ws / "gone.txt"], reason="delete_file")
        (ws / "gone.txt").unlink()
        state.messages.append(UserMessage(tool_results=tuple(result(c.id, c.name) for c in first)))
        trees["after 1"] = tree(ws)

        second = (call("c3", "write_file"), call("c4", "write_file"))
        state.messages.append(AssistantMessage(tool_calls=second))
        origin = CheckpointOrigin(session_id=THREAD, message_index=len(state.messages))
        await files.snapshot(origin, ws, [ws / "data.bin"], reason="write_file")
        write(ws / "data.bin", b"short", 0o644)
        await files.snapshot(origin, ws, [ws / "new/dir/made.txt"], reason="write_file")
        write(ws / "new/dir/made.txt", b"made by the run\n")
        state.messages.append(UserMessage(tool_results=tuple(result(c.id, c.name) for c in second)))
        state.messages.append(AssistantMessage(text="done"))
        state.step = 3
        state.stop_cause = StopCause.COMPLETED
        trees["end"] = tree(ws)

        checkpoints = CheckpointStore(bus)
        await checkpoints.save(state, "finished")
        for done in (*first, *second):
            await checkpoints.call_completed(RUN, done.id, "ok", is_error=False)
        return trees

    return on_store(url, work)


def stored(url: str) -> tuple[RunState, str, set[str]]:
    async def work(bus: Bus) -> tuple[RunState, str, set[str]]:
        checkpoints = CheckpointStore(bus)
        checkpoint = await checkpoints.load(RUN)
        return checkpoint.state, checkpoint.status, set(await checkpoints.calls(RUN))

    return on_store(url, work)


# ── rewinding ────────────────────────────────────────────────────────────────────────


def test_rewind_restores_the_files_and_cuts_the_conversation(url: str, ws: Path) -> None:
    trees = durable_run(url, ws)

    done = tiller("rewind", RUN, "--to", "3", "--store", url, "--yes")

    assert done.exit_code == 0, done.stderr
    assert tree(ws) == trees["after 1"]
    state, status, calls = stored(url)
    assert len(state.messages) == 3
    assert isinstance(state.messages[-1], UserMessage)
    assert status == "suspended"
    assert set(state.calls) <= {"c1", "c2"}
    assert calls == {"c1", "c2"}  # the cut calls' records are gone
    lines = done.stdout.splitlines()
    assert "restored  data.bin" in lines
    assert "deleted   new/dir/made.txt" in lines
    assert "rmdir     new/dir/" in lines and "rmdir     new/" in lines
    assert "the conversation has 3 message(s) (was 6)" in done.stdout

    shown = tiller("runs", "show", RUN, "--store", url)
    assert shown.exit_code == 0, shown.stderr
    assert "assistant  done" not in shown.stdout
    assert "→ write_file" in shown.stdout and "→ delete_file" in shown.stdout

    # Further back: the checkpoints of the first batch are still there.
    again = tiller("rewind", RUN, "--to", "1", "--store", url, "--yes")
    assert again.exit_code == 0, again.stderr
    assert tree(ws) == trees["start"]
    state, _, calls = stored(url)
    assert [type(m) for m in state.messages] == [UserMessage]
    assert calls == set()


def test_a_rewound_run_resumes_from_the_cut(url: str, ws: Path, agent_ref: str) -> None:
    durable_run(url, ws, agent_ref)
    assert tiller("rewind", RUN, "--to", "3", "--store", url, "--yes").exit_code == 0

    resumed = tiller("runs", "resume", RUN, "--store", url, "--yes")

    assert resumed.exit_code == 0, resumed.stdout + resumed.stderr
    state, status, _ = stored(url)
    assert status == "finished"
    assert len(state.messages) == 4
    last = state.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.text == "continued after 3 messages"


def test_rewinding_to_the_end_keeps_the_conversation(url: str, ws: Path) -> None:
    trees = durable_run(url, ws)
    done = tiller("rewind", RUN, "--to", "5", "--store", url, "--yes")
    assert done.exit_code == 0, done.stderr
    assert tree(ws) == trees["end"]  # nothing was changed at or after message 5
    assert len(stored(url)[0].messages) == 5


# ── refusals ─────────────────────────────────────────────────────────────────────────


def unchanged(url: str, ws: Path, trees: dict[str, Tree]) -> None:
    assert tree(ws) == trees["end"]
    state, status, calls = stored(url)
    assert (len(state.messages), status, calls) == (6, "finished", {"c1", "c2", "c3", "c4"})


@pytest.mark.parametrize(
    ("index", "problem"),
    [
        ("2", "--to 2 would not leave a conversation the model can continue"),
        ("4", "--to 4 would not leave a conversation the model can continue"),
        ("0", "--to 0 would not leave a conversation the model can continue"),
        ("7", "--to 7 is out of range: run r-rw has 6 message(s)"),
        ("-1", "--to -1 is out of range"),
    ],
)
def test_an_index_that_leaves_no_legal_transcript_is_refused(
    url: str, ws: Path, index: str, problem: str
) -> None:
    trees = durable_run(url, ws)
    done = tiller("rewind", RUN, f"--to={index}", "--store", url, "--yes")
    assert done.exit_code == 2, done.stdout
    assert problem in done.stderr
    assert "valid indexes: 1, 3, 5" in done.stderr
    unchanged(url, ws, trees)


def test_a_run_still_running_is_refused(url: str, ws: Path) -> None:
    trees = durable_run(url, ws)

    async def hold(bus: Bus) -> None:
        await CheckpointStore(bus).hold(RUN, "worker-1", 600.0)

    on_store(url, hold)
    done = tiller("rewind", RUN, "--to", "3", "--store", url, "--yes")
    assert done.exit_code == 2, done.stdout
    assert f"run {RUN} is still running (worker-1 holds it" in done.stderr
    unchanged(url, ws, trees)


def test_without_yes_away_from_a_terminal_it_only_shows_the_plan(url: str, ws: Path) -> None:
    trees = durable_run(url, ws)
    done = tiller("rewind", RUN, "--to", "3", "--store", url)
    assert done.exit_code == 2, done.stdout
    assert "1 file(s) to restore, 1 to delete" in done.stdout
    assert "restore   data.bin" in done.stdout.splitlines()
    assert "pass --yes" in done.stderr
    unchanged(url, ws, trees)


def test_an_unknown_run_is_a_clear_error(url: str) -> None:
    done = tiller("rewind", "nope", "--to", "1", "--store", url, "--yes")
    assert done.exit_code == 2
    assert "no checkpoint for run 'nope'" in done.stderr


def test_a_run_without_its_workspace_needs_one(url: str, ws: Path) -> None:
    trees = durable_run(url, ws)

    async def forget_policy(bus: Bus) -> None:
        checkpoints = CheckpointStore(bus)
        checkpoint = await checkpoints.load(RUN)
        checkpoint.state.policy = None
        await checkpoints.save(checkpoint.state, "finished")

    on_store(url, forget_policy)
    refused = tiller("rewind", RUN, "--to", "3", "--store", url, "--yes")
    assert refused.exit_code == 2
    assert "pass --workspace" in refused.stderr
    assert tree(ws) == trees["end"]

    done = tiller("rewind", RUN, "--to", "3", "--store", url, "--yes", "--workspace", str(ws))
    assert done.exit_code == 0, done.stderr
    assert tree(ws) == trees["after 1"]


def test_files_that_cannot_be_restored_fail_and_the_same_rewind_finishes_later(
    url: str, ws: Path
) -> None:
    trees = durable_run(url, ws)
    blob_key = f"sha256/{hashlib.sha256(BINARY).hexdigest()}"

    async def lose_blob(bus: Bus) -> None:
        await (await bus.kv(FILE_BLOBS_BUCKET)).delete(blob_key)

    on_store(url, lose_blob)
    failed = tiller("rewind", RUN, "--to", "3", "--store", url, "--yes")
    assert failed.exit_code == 1, failed.stdout
    assert "1 file(s) could not be restored" in failed.stderr
    assert "failed    data.bin" in failed.stderr
    assert len(stored(url)[0].messages) == 3  # the conversation was cut first

    async def bring_back(bus: Bus) -> None:
        await (await bus.kv(FILE_BLOBS_BUCKET)).put(blob_key, BINARY)

    on_store(url, bring_back)
    done = tiller("rewind", RUN, "--to", "3", "--store", url, "--yes")
    assert done.exit_code == 0, done.stderr
    assert tree(ws) == trees["after 1"]


# ── the task checklist goes back too ─────────────────────────────────────────────────


def checklist_run(url: str, ws: Path) -> list[list[tuple[str, str, str]]]:
    """A real run with a store whose model keeps a checklist through the task tools:

    0 user "go" · 1 assistant: task_create x2 · 2 user: results ·
    3 assistant: task_update t1 completed, task_create · 4 user: results · 5 assistant "done".

    Returns the checklist (id, subject, status) after each batch."""
    from tiller.loop import Agent, RunOptions
    from tiller.model import ScriptedModel
    from tiller.store import DEFAULT_BUCKET
    from tiller.tools.builtin import task_create, task_update

    def create(subject: str) -> dict[str, Any]:
        return {"name": "task_create", "arguments": {"subject": subject}}

    model = ScriptedModel(
        [
            {"tool_calls": [create("Find the bug"), create("Fix it")]},
            {
                "tool_calls": [
                    {"name": "task_update", "arguments": {"id": "t1", "status": "completed"}},
                    create("Verify"),
                ]
            },
            "done",
        ]
    )
    agent = Agent(model, [task_create, task_update])

    async def work(bus: Bus) -> RunState:
        ctx = RunContext.sandboxed(ws, AllowAll()).with_store(bus)
        options = RunOptions(checkpoint_bucket=DEFAULT_BUCKET)
        state = RunState(run_id=RUN, thread_id=THREAD, messages=[UserMessage(text="go")])
        record_policy(state, ctx, options)
        result = await agent.run_in(ctx, state, options)
        assert result.stop_cause is StopCause.COMPLETED
        return result.state

    final = on_store(url, work)
    assert len(final.messages) == 6
    return [
        [],
        [("t1", "Find the bug", "pending"), ("t2", "Fix it", "pending")],
        [
            ("t1", "Find the bug", "completed"),
            ("t2", "Fix it", "pending"),
            ("t3", "Verify", "pending"),
        ],
    ]


def checklist(state: RunState) -> list[tuple[str, str, str]]:
    return [(task["id"], task["subject"], task["status"]) for task in state.tasks]


def test_rewind_restores_the_checklist_of_that_point(url: str, ws: Path) -> None:
    """Pins the break where `tiller rewind` cut the conversation but left the checklist as
    the run's end left it: the model resumed at message 3 reading t1 completed and t3,
    made by calls the rewind had cut."""
    start, after_first, end = checklist_run(url, ws)
    assert checklist(stored(url)[0]) == end

    done = tiller("rewind", RUN, "--to", "5", "--store", url, "--yes")
    assert done.exit_code == 0, done.stderr
    assert checklist(stored(url)[0]) == end  # nothing after message 5 changed it

    done = tiller("rewind", RUN, "--to", "3", "--store", url, "--yes")
    assert done.exit_code == 0, done.stderr
    state = stored(url)[0]
    assert len(state.messages) == 3
    assert checklist(state) == after_first
    assert [entry.messages for entry in state.tasks_history] == [2]  # the cut changes left

    shown = tiller("runs", "show", RUN, "--store", url)
    assert shown.exit_code == 0, shown.stderr
    assert "Verify" not in shown.stdout

    done = tiller("rewind", RUN, "--to", "1", "--store", url, "--yes")
    assert done.exit_code == 0, done.stderr
    state = stored(url)[0]
    assert checklist(state) == start and state.tasks_history == []


def test_a_rewound_run_resumes_with_the_checklist_of_the_cut(
    url: str, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the rewind, the resumed run's broker is seeded with the restored checklist:
    a task made after the cut gets the id the cut freed (t3 again), not t4."""
    name = f"rewind_tasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from tiller.loop import Agent\n"
        "from tiller.model import ScriptedModel\n"
        "from tiller.tools.builtin import task_create\n"
        "def build():\n"
        "    return Agent(ScriptedModel([{'tool_calls': [{'name': 'task_create', "
        "'arguments': {'subject': 'Redo'}}]}, 'ok'], per_run=False), [task_create])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    checklist_run(url, ws)

    async def point_at_agent(bus: Bus) -> None:
        checkpoints = CheckpointStore(bus)
        checkpoint = await checkpoints.load(RUN)
        checkpoint.state.agent_ref = f"{name}:build"
        await checkpoints.save(checkpoint.state, checkpoint.status)

    on_store(url, point_at_agent)
    assert tiller("rewind", RUN, "--to", "3", "--store", url, "--yes").exit_code == 0

    resumed = tiller("runs", "resume", RUN, "--store", url, "--yes")

    assert resumed.exit_code == 0, resumed.stdout + resumed.stderr
    state = stored(url)[0]
    assert checklist(state) == [
        ("t1", "Find the bug", "pending"),
        ("t2", "Fix it", "pending"),
        ("t3", "Redo", "pending"),
    ]
