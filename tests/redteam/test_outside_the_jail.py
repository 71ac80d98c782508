"""Nothing outside the jail changes, whatever the model asks for and whatever the person
answers (`--yes`, full_access): the shell writes to the sentinel beside the workspace by
its absolute path, through a symlink and through /proc, and the file tools try a link out
of the jail. A guard: this holds on main, and must keep holding as the sandbox changes
(an unprivileged uid, read-only kernel knobs)."""

from __future__ import annotations

import shlex

from .conftest import Host, call


def test_neither_the_shell_nor_the_file_tools_write_outside_the_jail(host: Host) -> None:
    keep = shlex.quote(str(host.sentinel / "keep.txt"))
    sentinel = shlex.quote(str(host.sentinel))
    attempts = [
        f"echo changed >> {keep}",
        f"{host.marker_command}",
        f"rm -rf {sentinel}/sub",
        f"ln -s {sentinel} out && echo changed >> out/keep.txt",
        f"echo changed >> /proc/self/root{host.sentinel}/keep.txt",
        f"echo changed >> /proc/1/root{host.sentinel}/keep.txt",
        "echo changed >> /proc/1/cwd/../outside/keep.txt",
        f"cd .. && echo changed >> outside/keep.txt; cd {shlex.quote(str(host.workspace))}",
    ]
    done = host.run(
        [
            *(call("execute_command", command=attempt) for attempt in attempts),
            call("execute_command", command=f"ln -sfn {sentinel} link"),
            call("write_file", path="link/keep.txt", content="changed\n"),
            call("write_file", path="../outside/keep.txt", content="changed\n"),
            call("edit_file", path="link/keep.txt", old="host", new="model"),
            "Done.",
        ],
        "--mode",
        "full_access",
        "--yes",
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    host.assert_untouched()
