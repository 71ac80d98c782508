"""100 MiB of command output through a real `tiller run` (issue 13, item 8): the tiller
process stays under a fixed peak RSS, every store record stays small, the result holds a
head and a tail and names the spill file, which holds the whole output; the live stream
is bounded too and stays valid."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

import tiller
from tiller.tools import DEFAULT_SANDBOX

from .memory_support import RSS_BOUND_MIB

OUTPUT_BYTES = 100 * 1024 * 1024
#: The largest record the store may hold for the run (the head and tail of the result,
#: a bounded live stream, the transcript).
RECORD_BOUND = 2 * 1024 * 1024

_CHILD = textwrap.dedent(
    """
    import resource, runpy, sys
    sys.argv = ["tiller", *sys.argv[1:]]
    try:
        runpy.run_module("tiller", run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    # VmHWM, not ru_maxrss: Linux carries the forking parent's peak (the test runner's)
    # into ru_maxrss across exec, while VmHWM belongs to this process image alone.
    status = open('/proc/self/status').read().splitlines()
    peak = int(next(l for l in status if l.startswith('VmHWM')).split()[1]) / 1024
    print(f"PEAK_MIB={peak}", file=sys.stderr)
    sys.exit(code)
    """
)


@pytest.mark.skipif(
    not DEFAULT_SANDBOX.probe().available, reason=DEFAULT_SANDBOX.probe().reason or ""
)
def test_100_mib_of_output_keeps_tiller_and_its_records_small(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    command = f"head -c {OUTPUT_BYTES} /dev/zero | tr '\\0' a; echo; echo the-end"
    script = tmp_path / "script.yaml"
    script.write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "tool_calls": [
                            {"name": "execute_command", "arguments": {"command": command}}
                        ]
                    },
                    "done.",
                ]
            }
        )
    )
    store = tmp_path / "store.db"
    env = {**os.environ, "PYTHONPATH": str(Path(tiller.__file__).parents[1])}
    argv = ["run", "go", "-m", f"scripted:{script}", "-w", str(workspace)]
    argv += ["--store", f"sqlite:///{store}", "--yes"]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    peak = float(done.stderr.rsplit("PEAK_MIB=", 1)[1].split()[0])
    assert peak < RSS_BOUND_MIB

    # The call's id is the run's (`{run_id}-call-1`); the CLI picks the run id.
    (spill,) = (workspace / ".tiller" / "spill").glob("*-call-1.log")
    assert spill.stat().st_size == OUTPUT_BYTES + len("\nthe-end\n")

    with sqlite3.connect(store) as db:
        records = db.execute("select key, value from kv").fetchall()
    assert max(len(value) for _, value in records) < RECORD_BOUND
    call = next(orjson.loads(v) for k, v in records if k.endswith(f"/calls/{spill.stem}"))
    assert call["content"].startswith("a" * 1000)
    assert f".tiller/spill/{spill.name}" in call["content"]
    assert call["content"].endswith("the-end\n[exit code 0]")

    events = [
        event
        for key, value in records
        if "/" in key and key.rsplit("/", 1)[1].isdigit()
        for event in orjson.loads(value).get("events", [])
    ]
    live = "".join(
        e["value"]["text"]
        for e in events
        if e.get("type") == "CUSTOM" and e["value"].get("kind") == "output"
    )
    assert len(live) < 300 * 1024
    assert "live output stops" in live
    assert [e["type"] for e in events].count("RUN_FINISHED") == 1
