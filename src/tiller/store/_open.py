"""`open_bus(url)`: the Bus a URL names (the forms are in `tiller.store`'s docstring).

Each backend is imported only when its scheme is asked for: SQLite's, NATS's (nats-py).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from .. import _public
from ..errors import UsageError
from ._bus import Bus, Clock, check_namespace, wall_clock
from ._memory import MemoryBus

__all__ = ["open_bus"]

_SQLITE_OPTIONS = ("poll_interval", "busy_timeout", "retention")


async def open_bus(
    url: str, *, clock: Clock = wall_clock, namespace: str = "", synced: bool = True
) -> Bus:
    """Open the Bus that `url` names (see the module docstring for the forms).

    `clock` gives lease and job-lease time (inject a fake one in tests); `namespace`
    prefixes every bucket, subject and queue, so users of one file or server stay apart.
    `synced=False` lets a SQLite store commit without syncing to disk (`SqliteBus`: only
    for writes that can be made again; the other stores ignore it).
    """
    check_namespace(namespace)
    parts = urlsplit(url)
    if parts.scheme == "memory":
        if parts.netloc or parts.path or parts.query:
            raise UsageError(f"{url!r}: a memory store takes no location; write 'memory://'")
        return MemoryBus(clock=clock, namespace=namespace, url=url)
    if parts.scheme == "sqlite":
        if parts.netloc or not parts.path.startswith("/") or len(parts.path) < 2:
            raise UsageError(
                f"{url!r}: write 'sqlite:///relative/path.db' or 'sqlite:////absolute/path.db'"
            )
        options: dict[str, float] = {}
        for name, raw in parse_qsl(parts.query, keep_blank_values=True):
            if name not in _SQLITE_OPTIONS:
                known = ", ".join(_SQLITE_OPTIONS)
                raise UsageError(f"{url!r}: unknown option {name!r}; the options are {known}")
            try:
                options[name] = float(raw)
            except ValueError:
                raise UsageError(f"{url!r}: {name} must be a number of seconds") from None
            if not options[name] > 0:
                raise UsageError(f"{url!r}: {name} must be positive")
        from ._sqlite import SqliteBus  # sqlite3 and its backend load when first used

        return await SqliteBus.open(
            parts.path[1:],
            clock=clock,
            namespace=namespace,
            url=url,
            synced=synced,
            **options,
        )
    if parts.scheme == "nats":
        # Imported here: nats-py is only loaded by programs that use NATS. (The ignore lets
        # this check before the module exists.)
        from ._nats import NatsBus  # type: ignore[import-not-found, unused-ignore]

        bus: Bus = await NatsBus.connect(url, clock=clock, namespace=namespace)
        return bus
    raise UsageError(
        f"{url!r}: unknown store; use 'memory://', 'sqlite:///path.db' or 'nats://host:4222'"
    )


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
