"""`OutputBudget`: a step's outputs share one budget; the overflow is spilled, never lost."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiller import UsageError
from tiller.conversation import ToolResult
from tiller.tools import Jail, OutputBudget

POINTER = re.compile(r"\[output truncated: (\d+) bytes more in (.+)\]$")


def spilled(capped: str, base: Path) -> tuple[int, Path]:
    match = POINTER.search(capped)
    assert match is not None, capped
    return int(match[1]), base / match[2]


def test_output_that_fits_is_untouched(tmp_path: Path) -> None:
    budget = OutputBudget(10)
    assert budget.cap("hello", "c1", tmp_path / "spill") == "hello"
    assert budget.remaining == 5
    assert not (tmp_path / "spill").exists()


def test_overflow_is_cut_and_spilled_whole(tmp_path: Path) -> None:
    budget = OutputBudget(12)
    full = "line one\nline two\nline three\n"
    capped = budget.cap(full, "run-call-1", tmp_path / "spill", relative_to=tmp_path)
    more, path = spilled(capped, tmp_path)
    assert capped == ("line one\nlin\n[output truncated: 17 bytes more in spill/run-call-1.txt]")
    assert more == len(full.encode()) - 12
    assert path.read_text() == full
    assert budget.remaining == 0


def test_the_budget_is_shared_by_a_turns_calls(tmp_path: Path) -> None:
    budget = OutputBudget(10)
    assert budget.cap("123456", "a", tmp_path) == "123456"
    capped = budget.cap("abcdefgh", "b", tmp_path)
    assert capped.startswith("abcd\n[output truncated: 4 bytes more in ")
    capped = budget.cap("xyz", "c", tmp_path)
    assert capped.startswith("[output truncated: 3 bytes more in ")
    assert (tmp_path / "c.txt").read_text() == "xyz"
    assert budget.cap("", "d", tmp_path) == ""


def test_without_relative_to_the_pointer_is_absolute(tmp_path: Path) -> None:
    capped = OutputBudget(0).cap("data", "c/../x", tmp_path)
    _, path = spilled(capped, Path("/"))
    assert path == tmp_path / "c_.._x.txt"
    assert path.read_text() == "data"


def test_spills_never_overwrite_each_other(tmp_path: Path) -> None:
    budget = OutputBudget(0)
    budget.cap("first", "same", tmp_path)
    budget.cap("second", "same", tmp_path)
    assert (tmp_path / "same.txt").read_text() == "first"
    assert (tmp_path / "same-1.txt").read_text() == "second"


def test_the_cut_never_splits_a_character(tmp_path: Path) -> None:
    budget = OutputBudget(5)
    capped = budget.cap("héllo wörld", "c", tmp_path)  # é is 2 bytes: h é l l = 5 bytes
    assert capped.startswith("héll\n")
    budget = OutputBudget(2)
    capped = budget.cap("日本", "d", tmp_path)  # 3 bytes each: nothing fits
    assert capped.startswith("[output truncated: 6 bytes more in ")


@given(text=st.text(max_size=60), limit=st.integers(min_value=0, max_value=80))
def test_nothing_is_ever_lost(
    tmp_path_factory: pytest.TempPathFactory, text: str, limit: int
) -> None:
    spill = tmp_path_factory.mktemp("spill")
    capped = OutputBudget(limit).cap(text, "call", spill, relative_to=spill)
    if capped == text:
        assert len(text.encode()) <= limit
        return
    more, path = spilled(capped, spill)
    data = text.encode()
    kept = len(data) - more
    assert limit - 4 < kept <= limit  # a UTF-8 character is at most 4 bytes
    head = data[:kept].decode()  # raises if the cut split a character
    expected = head if not head or head.endswith("\n") else head + "\n"
    assert capped == f"{expected}[output truncated: {more} bytes more in {path.name}]"
    assert path.read_bytes() == data


def test_cap_result_uses_the_run_spill_dir(tmp_path: Path) -> None:
    tools = Jail(tmp_path, output_budget_bytes=4)
    budget = OutputBudget.for_turn(tools)
    result = ToolResult(call_id="r-call-1", name="t", content="0123456789", is_error=True)
    capped = budget.cap_result(result, tools)
    assert capped.is_error and capped.call_id == "r-call-1"
    assert capped.content == (
        "0123\n[output truncated: 6 bytes more in .tiller/spill/r-call-1.txt]"
    )
    assert (tools.spill_dir / "r-call-1.txt").read_text() == "0123456789"
    small = ToolResult(call_id="r-call-2", name="t", content="")
    assert budget.cap_result(small, tools) is small


async def test_concurrent_calls_share_the_budget_exactly(tmp_path: Path) -> None:
    budget = OutputBudget(1000)

    def cap(n: int) -> str:
        return budget.cap("x" * 100, f"call-{n}", tmp_path)

    results = await asyncio.gather(*(asyncio.to_thread(cap, n) for n in range(30)))
    shown = sum(len(r.split("[output truncated")[0].rstrip("\n")) for r in results)
    assert shown == 1000
    assert budget.remaining == 0
    assert len(os.listdir(tmp_path)) == 20


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(UsageError):
        OutputBudget(-1)


def test_a_spill_dir_replaced_by_a_symlink_is_never_written_through(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    (root / ".tiller").mkdir(parents=True)
    outside.mkdir()
    (root / ".tiller" / "spill").symlink_to(outside)  # what a command in the jail can do
    tools = Jail(root, output_budget_bytes=4)
    result = ToolResult(call_id="r-call-1", name="t", content="0123456789")
    capped = OutputBudget.for_turn(tools).cap_result(result, tools)
    assert capped.content.startswith("0123\n[output truncated: 6 bytes more, not saved: ")
    assert list(outside.iterdir()) == []
