"""`TaintFlow`: the interlock's view beyond one call — background jobs, and files.

The interlock (`tiller.policy.Interlock`) checks each call against the conversation's
taint. Two ways around it go through things that outlive a call, and this is where the
run watches them (DESIGN §11, law 6):

- **A sender started early.** A background job started while the conversation was clean,
  with the network, can wait for a file and send it; once the conversation holds private
  data and untrusted input, a plain `write_file` would hand it the secret. So when a
  batch's taint is private and untrusted, every job that holds the network is stopped
  (`on_trifecta = "block"`, the default), its status and a note saying the interlock
  stopped it; and while a networked job still runs in such a conversation, every call
  that may write (not read-only; `background_process` only reaches the run's own jobs)
  counts as a possible send, refused or asked per `on_trifecta`, the reason naming the
  job (with `"ask"`, the jobs keep running and a person is asked before each write).
- **Taint that outlives the run.** Files a run wrote while its conversation held
  untrusted input are listed in the workspace's `TaintIndex` with the run's taint; a
  later run that reads one (through the file tools, which report their reads:
  `watching_reads`) inherits it. What a shell command or a background job wrote is found
  by comparing file stamps (`stamp_workspace`) before and after. A shell command's reads
  cannot be watched, so in a workspace whose index lists untrusted files, the sandboxed
  shell's output counts as untrusted; and within one batch, every call that reads
  workspace files counts as possibly untrusted for the others (its actual reads are
  known only after it ran). Private-only runs list nothing: every read of a workspace
  file counts as private already.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from ..conversation import Taint
from ..policy import Interlock, capabilities_of
from ..tools import (
    DEFAULT_SANDBOX,
    TAINT_INDEX,
    BackgroundJobs,
    Capability,
    Jail,
    JobStatus,
    RiskClass,
    Sandbox,
    Stamps,
    TaintIndex,
    TaintIndexError,
    Tool,
    changed_files,
    stamp_workspace,
)

__all__ = ["TaintFlow", "shell_holds_network"]

_log = logging.getLogger("tiller.taint")

#: As plain ints: a flag's `&` goes through the enum machinery, and these run every step.
_TRIFECTA: Final = (Taint.PRIVATE_DATA | Taint.UNTRUSTED_INPUT)._value_
_UNTRUSTED: Final = Taint.UNTRUSTED_INPUT._value_
#: The index's own files (`taint.json`, its lock and its temporary files).
_OWN_FILES: Final = f"{TAINT_INDEX.parent.as_posix()}/taint."


def shell_holds_network(jail: Jail, sandbox: Sandbox = DEFAULT_SANDBOX) -> bool:
    """Whether the run's shell commands can reach the network: the run granted it, or
    they run unsandboxed (accepted where `sandbox` cannot run), which always can. (Probes
    the sandbox only in the second case, once per process.)"""
    if jail.network:
        return True
    return jail.unsandboxed_shell and not sandbox.probe().available


def _trifecta(taint: Taint) -> bool:
    return taint._value_ & _TRIFECTA == _TRIFECTA


class TaintFlow:
    """One run's watch over its background jobs and the files it reads and writes."""

    __slots__ = (
        "_index",
        "_index_path",
        "_index_stamp",
        "_interlock",
        "_jobs",
        "_network",
        "_root",
        "_run_id",
        "_stamps",
        "_untrusted_files",
    )

    def __init__(
        self,
        root: Path,
        interlock: Interlock,
        jobs: BackgroundJobs,
        *,
        run_id: str,
        network: bool,
    ) -> None:
        self._root = root
        self._interlock = interlock
        #: The run's jobs, then its ancestors' (a subagent's write reaches them too).
        self._jobs: list[BackgroundJobs] = [jobs]
        self._run_id = run_id
        self._network = network
        self._index = TaintIndex(root)
        self._index_path = os.fspath(root / TAINT_INDEX)
        self._index_stamp: tuple[int, int, int] | None = None
        self._untrusted_files = False
        #: The workspace's file stamps since the conversation first held untrusted input.
        self._stamps: Stamps | None = None
        self._refresh()

    def watch_parent(self, flow: TaintFlow) -> None:
        """This run is a subagent of `flow`'s run: the parent's background jobs (and
        theirs) share the workspace, so a write here can feed them too."""
        self._jobs.extend(job for job in flow._jobs if job not in self._jobs)

    def _networked(self) -> list[JobStatus]:
        return [status for jobs in self._jobs for status in jobs.networked()]

    # ── the index, as other runs change it ───────────────────────────────────────

    def _refresh(self) -> None:
        """Reload the index if another run changed it (one `stat` when it did not)."""
        try:
            st = os.stat(self._index_path)
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stamp = None
        except OSError:
            stamp = (-1, -1, -1)
        if stamp != self._index_stamp or stamp == (-1, -1, -1):
            self._index_stamp = stamp
            fresh = TaintIndex(self._root)
            if stamp is not None:
                fresh.load()
            # Within the run, what the index listed stays listed (law 6: taint only grows).
            fresh.absorb(self._index)
            self._index = fresh
            self._untrusted_files = self._index.holds_untrusted()

    # ── what calls bring ─────────────────────────────────────────────────────────

    def capabilities(self, tool: Any) -> Capability:
        """What `tool` can do in this run: `capabilities_of`, except that a sandboxed
        shell keeps its untrusted input when the workspace lists untrusted files (its
        command may read them, and its reads cannot be watched)."""
        able = capabilities_of(tool, network=self._network)
        if self._untrusted_files:
            able |= capabilities_of(tool) & Capability.UNTRUSTED_INPUT
        return able

    def for_batch(self, able: Iterable[Capability]) -> list[Capability]:
        """The batch's capabilities as the other calls of the batch see them: where the
        workspace lists untrusted files, a call that reads files may bring them."""
        if not self._untrusted_files:
            return list(able)
        return [
            each | Capability.UNTRUSTED_INPUT if each & Capability.PRIVATE_DATA else each
            for each in able
        ]

    def taint_of_reads(self, paths: Iterable[str]) -> Taint:
        """What the workspace files a call read carry from earlier runs."""
        taint = Taint.NONE
        if self._index_stamp is None and not self._index.entries:
            return taint  # no index: nothing listed (the common case)
        for path in paths:
            taint |= self._index.taint_of(path)
        return taint

    # ── background jobs ──────────────────────────────────────────────────────────

    async def _enforce(self, taint: Taint) -> None:
        """With private data and untrusted input, stop the jobs that hold the network."""
        if not _trifecta(taint) or self._interlock.on_trifecta != "block":
            return
        for jobs in self._jobs:
            if jobs.networked():
                await jobs.stop_networked(
                    "this conversation now holds private data and untrusted input, and the "
                    "command holds the network: the untrusted text could have it send the "
                    "private data out"
                )

    def sends_through(self, tool: Tool | None, taint: Taint, arguments: Mapping[str, Any]) -> str:
        """What a call to `tool` with `arguments` could send through, on a conversation
        tainted `taint`: a running background job that holds the network, named; or `""`.
        A call the tool declares read-only (`read_only`, or `risk_of` is `read_only`:
        `background_process` reading a job) writes nothing a job could send; an unknown
        tool (None) runs nothing at all."""
        if not _trifecta(taint) or self._interlock.on_trifecta == "allow":
            return ""
        if tool is None or tool.read_only is True:
            return ""
        try:
            if tool.risk_of(arguments) is RiskClass.READ_ONLY:
                return ""
        except Exception:  # an unreadable declaration counts as a write (law 3)
            pass
        jobs = self._networked()
        if not jobs:
            return ""
        named = ", ".join(f"{job.id} (`{job.command}`)" for job in jobs[:3])
        more = f" and {len(jobs) - 3} more" if len(jobs) > 3 else ""
        holds = "holds" if len(jobs) == 1 else "hold"
        return (
            f"the background command{'s' if len(jobs) > 1 else ''} {named}{more}, which "
            f"{holds} the network and may send what it writes (stop it with "
            "background_process first)"
        )

    # ── the batch ────────────────────────────────────────────────────────────────

    def refresh(self) -> None:
        """Before a batch: re-read the index if another run changed it."""
        self._refresh()

    @staticmethod
    def watches(taint: Taint) -> bool:
        """Whether a batch on a conversation tainted `taint` needs `before_batch` and
        `after_batch`: only one holding untrusted input does (the common step skips
        both; the trifecta holds it too)."""
        return bool(taint._value_ & _UNTRUSTED)

    async def before_batch(self, taint: Taint) -> None:
        """A batch is about to be gated; `taint` is the conversation's with every call of
        the batch ORed in (`refresh` has just re-read the index)."""
        if taint & Taint.UNTRUSTED_INPUT and self._stamps is None:
            # From now on what the run writes may carry untrusted text: remember how the
            # workspace looked before.
            self._stamps = await asyncio.to_thread(stamp_workspace, self._root)
        await self._enforce(taint)

    async def after_batch(self, taint: Taint, *, wrote: bool) -> None:
        """A batch ran (`wrote`: some call was not read-only); `taint` is the
        conversation's now."""
        await self._enforce(taint)
        if self._stamps is not None and (wrote or any(jobs.list() for jobs in self._jobs)):
            # (A background job may have written since the last batch, too.)
            await self._mark_written(taint)

    async def close(self, taint: Taint) -> None:
        """The run ended and its jobs are gone: list what they wrote since."""
        await self._mark_written(taint)

    async def _mark_written(self, taint: Taint) -> None:
        if self._stamps is None or not taint & Taint.UNTRUSTED_INPUT:
            return
        before = self._stamps
        after = await asyncio.to_thread(stamp_workspace, self._root)
        self._stamps = after
        # (The index's own files change with every mark: they carry nothing.)
        written = [p for p in changed_files(before, after) if not p.startswith(_OWN_FILES)]
        if not written and after.complete:
            return
        try:
            await asyncio.to_thread(
                self._index.mark, written, taint, run=self._run_id, complete=after.complete
            )
        except TaintIndexError as exc:
            _log.warning("%s; the files this run wrote keep no taint for later runs", exc)
        self._refresh()
