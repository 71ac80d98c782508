"""Root in the sandbox (issue 13, defect 1): when tiller runs as root, a command must not
run as uid 0 nor see the kernel's knobs writable, and root-only files under /etc stay
unreadable. The probe only *tests* writability (`test -w`): it never writes a sysctl."""

from __future__ import annotations

import os

import pytest

from .conftest import Host, call

# The findings are spelled split in the command (WRIT""ABLE) so that the command's own
# text, which the run's view echoes, never matches them.
PROBE = (
    "{ echo uid=$(id -u);"
    " for knob in /proc/sys/kernel/core_pattern /proc/sys/kernel/modprobe /proc/sysrq-trigger"
    ' /sys/kernel/uevent_helper; do test -w $knob && echo WRIT""ABLE $knob; done;'
    ' cat /etc/gshadow > /dev/null 2>&1 && echo READ""ABLE /etc/gshadow;'
    " true; } 2>&1 | tee probe.txt"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="the root-only escape needs tiller to run as root")
def test_a_command_run_by_root_tiller_is_not_root_in_the_sandbox(host: Host) -> None:
    done = host.run([call("execute_command", command=PROBE), "Done."], "--mode", "auto", "--yes")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    probe = host.workspace / "probe.txt"
    # The probe's report, from its file, or from the run's view if the file could not be
    # written; neither (the shell refused, as it must where no unprivileged uid can be
    # arranged) is safe too.
    report = probe.read_text() if probe.exists() else done.stdout
    assert "uid=0\n" not in report, f"the sandboxed command ran as uid 0:\n{report}"
    assert "WRITABLE" not in report, f"a kernel knob is writable in the sandbox:\n{report}"
    assert "READABLE" not in report, f"a root-only /etc file is readable:\n{report}"
    assert "uid=0" not in done.stdout.replace("uid=$(id -u)", ""), done.stdout
    host.assert_untouched()
