"""The shell's live output stops at its bound in characters, however big each read is.

Under load one read of the command's pipe can be a whole pipe's worth (64 KiB): the relay
checked the bound before taking a read, so the stream overshot by up to one read (seen
as 323,716 characters against 262,144 in `test_command_output_bounds.py`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from tiller.tools.builtin._shell import MAX_LIVE_OUTPUT_CHARS, _Relay

READ = 64 * 1024


@dataclass
class _Progress:
    texts: list[str] = field(default_factory=list)

    def output(self, text: str) -> None:
        self.texts.append(text)


@dataclass
class _Capture:
    chunks: int = 0
    spill: None = None

    def __call__(self, chunk: bytes) -> None:
        self.chunks += 1


def _relay_reads(sizes: list[int]) -> tuple[str, _Capture]:
    async def feed() -> tuple[str, _Capture]:
        progress, capture = _Progress(), _Capture()
        relay = _Relay(progress, asyncio.get_running_loop(), capture)  # type: ignore[arg-type]
        for size in sizes:
            relay(b"a" * size)
        relay.stop()
        return "".join(progress.texts), capture

    return asyncio.run(feed())


def test_big_reads_stop_exactly_at_the_bound() -> None:
    # Reads that do not add up to the bound: 7 x 60 KiB, past the 256 KiB bound.
    live, capture = _relay_reads([READ - 4096] * 7)
    head, _, notice = live.partition("\n[live output stops")
    assert head == "a" * MAX_LIVE_OUTPUT_CHARS
    assert notice.startswith(f" after {MAX_LIVE_OUTPUT_CHARS} characters")
    assert capture.chunks == 7  # the result's copy still sees every read


def test_a_read_that_crosses_the_bound_is_cut_there() -> None:
    live, _ = _relay_reads([MAX_LIVE_OUTPUT_CHARS - 10, READ])
    assert live.partition("\n[live output stops")[0] == "a" * MAX_LIVE_OUTPUT_CHARS


def test_output_of_exactly_the_bound_is_not_cut() -> None:
    live, _ = _relay_reads([MAX_LIVE_OUTPUT_CHARS])
    assert live == "a" * MAX_LIVE_OUTPUT_CHARS
