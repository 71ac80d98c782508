"""The live progress bar of `tiller eval run`: case runs done of all, how many pass, what
they cost so far, and the time left, fed by the eval's `on_progress`.

It draws on standard error, and only on a terminal: in a log or a pipe a bar redrawn in
place is noise, and the scorecard printed at the end says everything it said.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

if TYPE_CHECKING:
    from ..evals import EvalProgress

__all__ = ["EvalProgressBar"]


class EvalProgressBar:
    """`with EvalProgressBar(eval_id, total) as bar: await ev.run(on_progress=bar.update)`."""

    def __init__(self, eval_id: str, total: int, *, console: Console | None = None) -> None:
        self.console = console if console is not None else Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[passing]} passing"),
            TextColumn("{task.fields[cost]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.console.is_terminal,
            transient=False,
        )
        self._task: TaskID = self._progress.add_task(
            eval_id, total=total, passing=0, cost="$0.0000"
        )

    def __enter__(self) -> EvalProgressBar:
        self._progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._progress.stop()

    def update(self, progress: EvalProgress) -> None:
        """One more case run has a result (the eval's `on_progress`)."""
        self._progress.update(
            self._task,
            completed=progress.done,
            passing=progress.passed,
            cost=f"${progress.cost_usd:.4f}",
        )
