"""The line limit between an MCP server's stdout and tiller: a tiny relay process.

The MCP SDK's stdio transport buffers a line until its newline, so a server that writes a
gigabyte without one (a bug, or a hostile server) would take a gigabyte of tiller's
memory. tiller starts every stdio server through this script instead:

    python -I _line_limit.py MAX_BYTES -- COMMAND ARGS...

It runs COMMAND with our stdin and stderr (the SDK's pipes, untouched) and copies the
server's stdout to ours in chunks, counting the bytes since the last newline. A line
longer than MAX_BYTES stops the server: the relay says so on stderr (which tiller quotes
in its error) and exits, so the SDK sees the connection end. When the server exits, the
relay exits with its status; a signal that stops the relay (the SDK's SIGTERM) is passed
on. The server and the relay share the process group the SDK kills on shutdown.

Run as a file, with the standard library only (`-I`): importing tiller here would cost
every server start a quarter of a second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

_CHUNK = 1 << 16


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _line_limit.py MAX_BYTES -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    limit = int(argv[0])
    server = subprocess.Popen(argv[2:], stdout=subprocess.PIPE, close_fds=True)
    assert server.stdout is not None

    def pass_on(signum: int, _frame: object) -> None:
        server.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, pass_on)
    source = server.stdout.fileno()
    line = 0  # bytes since the last newline
    while True:
        chunk = os.read(source, _CHUNK)
        if not chunk:
            break
        first = chunk.find(b"\n")
        if first < 0:
            line += len(chunk)
        elif line + first > limit:
            line += first  # the line this chunk ends was too long
        else:  # (the lines between two newlines of one chunk are shorter than a chunk)
            line = len(chunk) - chunk.rfind(b"\n") - 1
        if line > limit:
            server.kill()
            print(
                f"tiller: the server wrote a line longer than {limit} bytes on stdout; "
                "it was stopped (an MCP message is one line of JSON)",
                file=sys.stderr,
                flush=True,
            )
            server.wait()
            return 1
        try:
            while chunk:
                chunk = chunk[os.write(1, chunk) :]
        except BrokenPipeError:  # tiller went away: so does the server
            server.kill()
            break
    return server.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
