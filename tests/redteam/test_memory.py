"""Host memory from a free file (issue 13, defect 8): a 2 GiB sparse file with text
first lines costs the disk nothing, and `read_file limit=1` and `grep` over it must not
take the whole file into the tiller process. Peak RSS is measured from a wrapper process
whose only child is `tiller run` (its RUSAGE_CHILDREN after the wait)."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import Host, call

SPARSE_BYTES = 2 * 1024**3
RSS_BOUND_MIB = 400
# A safety net for the machine the suite runs on, far above the bound: an unbounded
# read fails with MemoryError instead of taking the host's memory.
ADDRESS_SPACE_CAP = 8 * 1024**3

WRAPPER = """
import json, resource, subprocess, sys
cap = int(sys.argv[1])
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
done = subprocess.run(sys.argv[2:], capture_output=True, text=True, preexec_fn=limit,
                      stdin=subprocess.DEVNULL, timeout=300)
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
                  "peak_mib": peak_kib / 1024}))
"""


def test_a_sparse_file_does_not_fill_the_tiller_process(host: Host) -> None:
    big = host.workspace / "big.log"
    with big.open("wb") as file:
        file.write(b"first line of a huge log\n")
        # More text than the binary sniff reads, so the file passes as text; the hole
        # after it is one 2 GiB "line" of NULs.
        file.write(b"an ordinary log line\n" * 1024)
        file.truncate(SPARSE_BYTES)
    script = host.script(
        [
            call("read_file", path="big.log", limit=1),
            call("grep", pattern="first line", path="big.log"),
            "Done.",
        ]
    )
    argv = [
        sys.executable, "-m", "tiller", "run", "read the log",
        "-m", f"scripted:{script}", "-w", str(host.workspace),
        "--mode", "auto", "--store", host.store,
    ]  # fmt: skip
    wrapped = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(ADDRESS_SPACE_CAP), *argv],
        capture_output=True,
        text=True,
        timeout=360,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    result = json.loads(wrapped.stdout)
    assert result["rc"] == 0, result["stdout"] + result["stderr"]
    assert "MemoryError" not in result["stdout"] + result["stderr"]
    assert "first line of a huge log" in result["stdout"], result["stdout"]
    assert result["peak_mib"] < RSS_BOUND_MIB, (
        f"tiller took {result['peak_mib']:.0f} MiB of RSS for a 1-line read and a grep"
    )
    host.assert_untouched()
