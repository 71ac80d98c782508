"""Releasing a draft from the outbox passes the gate again: the policy engine (destructive
is still denied, also for arguments a person edited) and the pre_tool hooks the run pinned
when it started (never a tiller.toml planted in the workspace since: law 11); the person's
release answers every Ask."""

from __future__ import annotations

from pathlib import Path

from tiller.cli._release import release_check
from tiller.conversation import Taint
from tiller.pinned_policy import PinnedPolicy
from tiller.store import OutboxItem
from tiller.tools.builtin import execute_command, write_file


def item(workspace: Path, tool: str, arguments: dict[str, object]) -> OutboxItem:
    return OutboxItem(
        id="ob-1",
        run_id="r",
        thread_id="t",
        call_id="c",
        tool=tool,
        drafted_arguments=arguments,
        taint=Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT,
        workspace=str(workspace),
        created_at=0.0,
        updated_at=0.0,
    )


async def test_a_destructive_edit_is_still_denied(tmp_path: Path) -> None:
    edited = {"command": "rm -rf ~"}
    refusal = await release_check(
        item(tmp_path, "execute_command", edited), execute_command, edited
    )
    assert refusal is not None and refusal.startswith("Blocked by policy:")
    assert "destructive" in refusal


async def test_an_ask_is_answered_by_the_release(tmp_path: Path) -> None:
    args = {"path": "notes.txt", "content": "hi"}
    assert await release_check(item(tmp_path, "write_file", args), write_file, args) is None


async def test_the_runs_pinned_hooks_can_refuse(tmp_path: Path) -> None:
    (tmp_path / "tiller.toml").write_text(
        '[hooks]\npre_tool = [{ command = "echo no sends on fridays >&2; exit 2", '
        'name = "fridays" }]\n'
    )
    pinned = PinnedPolicy.read(tmp_path).to_data()
    (tmp_path / "tiller.toml").unlink()  # read once, when the run started
    args = {"path": "notes.txt", "content": "hi"}
    refusal = await release_check(
        item(tmp_path, "write_file", args), write_file, args, pinned=pinned
    )
    assert refusal == "Refused by hook fridays: no sends on fridays"


async def test_a_hook_planted_in_the_workspace_never_runs_at_release(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    marker = tmp_path / "marker"
    (workspace / "tiller.toml").write_text(
        f'[hooks]\npre_tool = [{{ command = "touch {marker}" }}]\n'
    )
    args = {"path": "notes.txt", "content": "hi"}
    assert await release_check(item(workspace, "write_file", args), write_file, args) is None
    assert not marker.exists()
