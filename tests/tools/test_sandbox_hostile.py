"""Hostile commands against the real bwrap sandbox: each runs through `execute_command`
and nothing outside the jail may change.

The world outside the jail is a sentinel file and a directory next to the jail (in
tmp_path, so under /tmp, which the sandbox replaces with a tmpfs), plus `/etc`, `/usr`, the
home directory, `/root` and `/tmp` probed with names unique to the test. Where a write
succeeds inside the sandbox (a tmpfs), the command reads it back, so the test shows the
write happened and stayed invisible, rather than passing because nothing ran.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tiller.tools import ExecContext, Execution, Jail

from .shell_support import SANDBOX_MISSING, SANDBOX_REASON, run

pytestmark = pytest.mark.skipif(
    SANDBOX_MISSING, reason=f"bwrap is unavailable on this machine: {SANDBOX_REASON}"
)

ORIGINAL = "original sentinel\n"


@dataclass
class World:
    """The jail, what lies around it, and a fingerprint of all of it."""

    jail: Path
    outside: Path  # a directory next to the jail
    sentinel: Path  # a file in it
    name: str  # unique file name the command tries to create everywhere
    ctx: ExecContext

    def probes(self) -> list[Path]:
        """Where a file named `name` must not appear on the host."""
        places = [Path("/etc"), Path("/usr"), Path("/tmp"), Path("/root"), Path.home()]
        places += [self.jail.parent, self.outside, Path("/")]
        return [place / self.name for place in places]

    def fingerprint(self) -> dict[str, str]:
        """Everything outside the jail a hostile command might touch, hashed."""
        seen: dict[str, str] = {}
        for path in sorted(self.jail.parent.rglob("*")):
            if path == self.jail or self.jail in path.parents:
                continue
            if path.is_symlink():
                seen[str(path)] = "link:" + os.readlink(path)
            elif path.is_file():
                seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                seen[str(path)] = "dir"
        for system in ("/etc/passwd", "/etc/hostname", "/etc/hosts"):
            if Path(system).is_file():
                seen[system] = hashlib.sha256(Path(system).read_bytes()).hexdigest()
        return seen

    async def run(self, command: str, ctx: ExecContext | None = None) -> Execution:
        before = self.fingerprint()
        async with asyncio.timeout(60):  # hang guard
            done: Execution = await run(ctx or self.ctx, command=command)
        assert self.fingerprint() == before, done.result.content
        assert self.sentinel.read_text() == ORIGINAL
        for probe in self.probes():
            assert not probe.exists(), f"{probe} appeared on the host"
        return done


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    jail = tmp_path / "jail"
    jail.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    sentinel = outside / "sentinel.txt"
    sentinel.write_text(ORIGINAL)
    name = f"tiller-pwn-{uuid.uuid4().hex}"
    yield World(jail, outside, sentinel, name, ExecContext.for_test(jail))
    for probe in World(jail, outside, sentinel, name, ExecContext.for_test(jail)).probes():
        if probe.exists():  # clean up after a failure, then let the assertion stand
            probe.unlink()


async def test_writing_to_etc_fails(world: World) -> None:
    done = await world.run(f"sh -c 'echo x > /etc/{world.name}'")
    assert done.is_error and "Read-only file system" in done.result.content


async def test_command_substitution_writing_outside(world: World) -> None:
    done = await world.run(
        f'echo "$(echo pwned > {world.sentinel}; echo pwned > ~/{world.name}; '
        f'echo pwned > /etc/{world.name}; echo ran)"; cat ~/{world.name}'
    )
    # The home directory is a tmpfs: the write worked, and vanished with the sandbox.
    assert "ran\npwned\n" in done.result.content


async def test_eval(world: World) -> None:
    done = await world.run(
        f"eval 'rm -f {world.sentinel}'; eval 'echo pwned >> /etc/passwd'; "
        f"eval 'rm -rf {world.outside}'; echo evaluated"
    )
    assert "evaluated" in done.result.content


async def test_xargs(world: World) -> None:
    done = await world.run(
        f"echo {world.sentinel} | xargs rm -f; echo {world.outside} | xargs rm -rf; "
        f"echo /etc/hostname | xargs rm -f; echo done"
    )
    assert "done" in done.result.content


async def test_remounting_root_read_write_then_writing(world: World) -> None:
    done = await world.run(
        "mount -o remount,rw /; mount -o remount,rw /etc; mount -o remount,rw /usr; "
        f"mount --bind {world.jail} /etc; "
        f"echo x > /etc/{world.name}; touch /usr/{world.name}; echo x > /{world.name}"
    )
    lines = done.result.content.splitlines()
    # Each of the four mounts failed with a message (its wording varies by util-linux).
    assert sum(line.startswith("mount: ") for line in lines) == 4
    assert sum("Read-only file system" in line for line in lines) == 3


async def test_writing_to_the_home_directory(world: World) -> None:
    done = await world.run(
        f"echo pwned > ~/{world.name} && echo pwned > /root/{world.name} && "
        f"cat ~/{world.name} /root/{world.name}"
    )
    assert done.result.content == "pwned\npwned\n[exit code 0]"


async def test_writing_to_tmp_outside_the_jail(world: World) -> None:
    done = await world.run(
        f"echo pwned > /tmp/{world.name} && cat /tmp/{world.name} && "
        f"mkdir -p {world.outside} && echo pwned > {world.sentinel} && cat {world.sentinel}"
    )
    if os.geteuid() == 0:
        # The command is not root: the directories bwrap made above the jail are root's.
        assert done.result.content.startswith("pwned\nmkdir: cannot create directory")
    else:
        # Both writes landed on the sandbox's own /tmp, which the host never sees.
        assert done.result.content == "pwned\npwned\n[exit code 0]"


async def test_writing_via_dot_dot_from_the_jail(world: World) -> None:
    done = await world.run(
        f"echo pwned > ../{world.name}; echo pwned > ../outside/sentinel.txt; "
        f"echo pwned > ../../{world.name}; cd ..; echo pwned > {world.name}; ls"
    )
    assert "jail" in done.result.content


async def test_a_symlink_made_in_the_jail_pointing_outside(world: World) -> None:
    (world.jail / "planted").symlink_to(world.sentinel)  # as a hostile repository might
    done = await world.run(
        f"ln -s {world.sentinel} link; echo pwned > link; echo pwned > planted; "
        f"ln -s {world.outside} outdir; echo pwned > outdir/{world.name}; "
        "ln -s /etc/passwd passwd; echo pwned >> passwd; "
        f"ln -s /etc etc; echo pwned > etc/{world.name}; echo end"
    )
    assert "end" in done.result.content


async def test_unshare_and_nsenter(world: World) -> None:
    done = await world.run(
        f"unshare -Ur sh -c 'mount -o remount,rw /etc; echo pwned > /etc/{world.name}'; "
        f"unshare -m sh -c 'mount -o remount,rw /etc && echo pwned > /etc/{world.name}'; "
        f"nsenter -t 1 -m -u -i -n -p sh -c 'echo pwned > /etc/{world.name}'; "
        f"nsenter --target 1 --all sh -c 'echo pwned > {world.sentinel}'; echo end"
    )
    content = done.result.content
    assert "end" in content
    assert "unshare" in content and "nsenter" in content  # each attempt was refused


# ── the network ──────────────────────────────────────────────────────────────────


@dataclass
class Listener:
    """A TCP server on 127.0.0.1: who connected, and the line each sent."""

    port: int
    connections: int
    received: list[bytes]
    got_line: asyncio.Event


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    seen = Listener(0, 0, [], asyncio.Event())

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.connections += 1
        seen.received.append(await reader.readline())
        seen.got_line.set()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    seen.port = server.sockets[0].getsockname()[1]
    async with server:
        yield seen


def _connect(port: int) -> str:
    return (
        f"if exec 3<>/dev/tcp/127.0.0.1/{port}; then echo hello >&3; echo connected; "
        "else echo refused; fi"
    )


async def test_no_network_without_the_grant(world: World, listener: Listener) -> None:
    done = await world.run(_connect(listener.port))
    assert done.result.content.splitlines()[-2] == "refused"
    assert listener.connections == 0 and listener.received == []


async def test_the_network_grant_shares_the_host_network(world: World, listener: Listener) -> None:
    ctx = ExecContext.for_test(world.jail, jail=Jail(world.jail).with_network())
    done = await world.run(_connect(listener.port), ctx)
    assert done.result.content == "connected\n[exit code 0]"
    async with asyncio.timeout(30):  # hang guard
        await listener.got_line.wait()
    assert listener.connections == 1 and listener.received == [b"hello\n"]
