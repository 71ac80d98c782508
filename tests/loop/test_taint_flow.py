"""`TaintFlow` on its own: which background job a write could send through."""

from __future__ import annotations

from pathlib import Path

from tiller.conversation import Taint
from tiller.loop._taint_flow import TaintFlow, shell_holds_network
from tiller.policy import Interlock
from tiller.tools import BackgroundJobs, Capability, Jail, Sandbox, TaintIndex
from tiller.tools.builtin import background_process, execute_command, read_file, write_file


async def test_a_write_while_a_networked_job_runs_is_refused_naming_the_job(
    workspace: Path,
) -> None:
    """`sends_through` names the job; the interlock's refusal says it. A job without the
    network, or a read-only call, is not a send."""
    jobs = BackgroundJobs()
    try:
        await jobs.start(["sleep", "30"], command="sleep 30 # offline", cwd=workspace, env={})
        flow = TaintFlow(workspace, Interlock(), jobs, run_id="r1", network=True)
        both = Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT
        assert flow.sends_through(write_file, both, {"path": "a"}) == ""
        await jobs.start(
            ["sleep", "30"], command="sleep 30 # sender", cwd=workspace, env={}, network=True
        )
        through = flow.sends_through(write_file, both, {"path": "a"})
        assert "bg-2 (`sleep 30 # sender`)" in through and "bg-1" not in through
        assert flow.sends_through(read_file, both, {"path": "a"}) == ""
        # Reading a job writes nothing (its declared risk is read-only); stopping one is
        # a process change the interlock cannot see through, so it counts (fail closed).
        assert flow.sends_through(background_process, both, {"action": "read", "id": "bg-2"}) == ""
        assert flow.sends_through(background_process, both, {"action": "stop", "id": "bg-2"})
        assert flow.sends_through(write_file, Taint.PRIVATE_DATA, {"path": "a"}) == ""
        verdict = Interlock().check(write_file, both, Capability.EXTERNAL_SEND, through=through)
        assert verdict.kind == "deny"
        assert verdict.reason.startswith(
            "write_file may send data out through the background command bg-2"
        )
        # On the trifecta, the run stops it (and only it).
        await flow.before_batch(both)
        assert [(s.id, s.state.value) for s in jobs.list()] == [
            ("bg-1", "running"),
            ("bg-2", "stopped by the interlock"),
        ]
        assert flow.sends_through(write_file, both, {"path": "a"}) == ""
    finally:
        await jobs.close()


async def test_an_index_emptied_mid_run_keeps_its_taint_for_the_run(workspace: Path) -> None:
    """Whatever rewrites `.tiller/taint.json` during a run (it should be out of the
    model's reach; this holds even if it is not), the run's view only grows."""
    (workspace / "TODO.md").write_text("fetched")
    TaintIndex(workspace).mark(["TODO.md"], Taint.UNTRUSTED_INPUT, run="r0")
    jobs = BackgroundJobs()
    flow = TaintFlow(workspace, Interlock(), jobs, run_id="r1", network=False)
    assert flow.taint_of_reads(["TODO.md"]) == Taint.UNTRUSTED_INPUT
    (workspace / ".tiller" / "taint.json").write_text('{"schema_version": 1, "files": {}}')
    await flow.before_batch(Taint.NONE)
    assert flow.taint_of_reads(["TODO.md"]) == Taint.UNTRUSTED_INPUT
    (workspace / ".tiller" / "taint.json").unlink()
    await flow.before_batch(Taint.NONE)
    assert flow.taint_of_reads(["TODO.md"]) == Taint.UNTRUSTED_INPUT
    await jobs.close()


def test_an_unsandboxed_shell_counts_as_holding_the_network(workspace: Path) -> None:
    """Where bwrap cannot run and the run accepted an unsandboxed shell, its commands
    reach the network whatever the grant: the interlock counts them as sends."""
    missing = Sandbox("/nonexistent/bwrap")
    tools = Jail(workspace)
    assert not shell_holds_network(tools, missing)
    assert shell_holds_network(tools.with_unsandboxed_shell(), missing)
    assert shell_holds_network(tools.with_network(), missing)
    flow = TaintFlow(workspace, Interlock(), BackgroundJobs(), run_id="r1", network=True)
    assert flow.capabilities(execute_command) & Capability.EXTERNAL_SEND
