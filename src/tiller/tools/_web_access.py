"""`WebAccess`: where `web_fetch` may connect, and `PrivateDestination`, its refusal.

A fetch runs in the host process, outside the sandbox: a URL the model chose must not reach
what the host can reach and the internet cannot (a local admin page, the cloud's metadata
service, a database on the LAN, tiller's own server). So every address a fetch would
connect to is vetted, on every redirect hop, and refused when it is:

- loopback, link-local (169.254/16, fe80::/10), private (10/8, 172.16/12, 192.168/16),
  unique-local (fc00::/7), site-local (fec0::/10), shared CGNAT space (100.64/10),
  "this network" (0/8), multicast, broadcast, reserved or otherwise not global;
- one of those wrapped in IPv6: IPv4-mapped (`::ffff:127.0.0.1`), IPv4-compatible
  (`::127.0.0.1`), NAT64 (`64:ff9b::/96`, `64:ff9b:1::/48`), 6to4 (`2002::/16`), Teredo;
- a cloud metadata address (169.254.169.254, fd00:ec2::254, Azure's 168.63.129.16);
- an address of one of this machine's own interfaces (`LocalAddresses`).

A name is resolved once (`WebAccess.resolve`, a seam tests replace), every address it
resolves to is vetted, and the connection goes to a vetted address (`_vetted_network`), so
there is no window for a second DNS answer to rebind the name.

A person opts in from `tiller.toml`, never the model:

```toml
[web]
allow_hosts = ["intranet.example", "localhost:8080"]   # a name or address, optional port
allow_ranges = ["10.1.0.0/16"]                          # CIDR ranges
```

An allowed host is connected to wherever it resolves; an allowed range lets any name that
resolves into it through. `WebAccess` is part of the run's `Jail`, so it is pinned with
the rest of the run's policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import subprocess
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeAlias

from ._tool import ToolError

__all__ = [
    "METADATA_ADDRESSES",
    "HostRule",
    "LocalAddresses",
    "PrivateDestination",
    "Resolver",
    "WebAccess",
    "host_literal",
    "private_reason",
    "system_resolve",
]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
#: `async resolve(host, port) -> addresses`: how a name becomes the addresses to vet.
Resolver: TypeAlias = Callable[[str, int], Awaitable[Sequence[str]]]

#: Cloud instance metadata services: credentials for the host's cloud identity live here.
METADATA_ADDRESSES: Final = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, ...
        ipaddress.ip_address("169.254.170.2"),  # AWS ECS task credentials
        ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
        ipaddress.ip_address("168.63.129.16"),  # Azure's wire server
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    }
)

_CGNAT: Final = ipaddress.ip_network("100.64.0.0/10")
_UNIQUE_LOCAL: Final = ipaddress.ip_network("fc00::/7")
_THIS_NETWORK: Final = ipaddress.ip_network("0.0.0.0/8")
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL: Final = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPATIBLE: Final = ipaddress.ip_network("::/96")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_LOOPBACK: Final = ipaddress.IPv4Address("127.0.0.1")
_HINT: Final = "a person can allow it in tiller.toml [web] allow_hosts or allow_ranges"


class PrivateDestination(ToolError):
    """`web_fetch` refused to connect to `host` because `address` is not public (`via`:
    the URL whose redirect led there)."""

    def __init__(self, host: str, address: str, reason: str, *, via: str | None = None) -> None:
        shown = host if host == address else f"{host} ({address})"
        hop = f" (a redirect from {via} led there)" if via is not None else ""
        super().__init__(f"web_fetch refuses {shown}{hop}: {reason}; {_HINT}")
        self.host = host
        self.address = address
        self.reason = reason
        self.via = via


# ── what counts as private ──────────────────────────────────────────────────────────


def private_reason(address: IPAddress) -> str | None:
    """Why `address` must not be connected to, or `None` when it is a public address.

    IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4) are judged by
    the address they carry."""
    if address in METADATA_ADDRESSES:
        return "it is a cloud metadata address"
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner = private_reason(embedded)
            return None if inner is None else f"it wraps {embedded}, and {inner}"
        if address.teredo is not None:
            return "Teredo tunnel addresses can reach any IPv4 host"
        if address in _NAT64_LOCAL:
            return "local-use NAT64 addresses are private"
    for test, reason in _NOT_PUBLIC:
        if test(address):
            return reason
    return None


_BROADCAST: Final = ipaddress.IPv4Address("255.255.255.255")

#: The kinds of address that are not public destinations, checked in order (the first
#: that matches says why); the last catches whatever else is not global.
_NOT_PUBLIC: Final[tuple[tuple[Callable[[IPAddress], bool], str], ...]] = (
    (lambda a: a.is_loopback, "loopback addresses are private"),
    (lambda a: a.is_link_local, "link-local addresses are private"),
    (
        lambda a: a.is_unspecified or a in _THIS_NETWORK,
        "unspecified and 'this network' addresses are not destinations",
    ),
    (lambda a: a.is_multicast, "multicast addresses are not destinations"),
    (lambda a: a == _BROADCAST, "the broadcast address is not a destination"),
    (lambda a: a in _UNIQUE_LOCAL, "unique-local addresses are private"),
    (lambda a: a in _CGNAT, "shared (carrier-grade NAT) addresses are private"),
    (
        lambda a: isinstance(a, ipaddress.IPv6Address) and a.is_site_local,
        "site-local addresses are private",
    ),
    (lambda a: a.is_reserved, "reserved addresses are not destinations"),
    (lambda a: a.is_private, "private-network addresses are private"),
    (lambda a: not a.is_global, "the address is not a public internet address"),
)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, if it is one of the forms that reach
    one: mapped, compatible (deprecated, still routed by some stacks), NAT64, 6to4."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def host_literal(host: str) -> IPAddress | None:
    """The address `host` spells, in any form a resolver accepts as a number: dotted
    (`127.0.0.1`), short (`127.1`), hex or octal parts (`0x7f.1`, `0177.0.0.1`), one
    integer (`2130706433`), IPv6 with or without brackets or a zone. `None` for a name."""
    text = host.strip().rstrip(".")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.split("%", 1)[0]  # an IPv6 zone (fe80::1%eth0)
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if ":" in text or not text:
        return None
    try:  # the C library's inet_aton: the spellings getaddrinfo would also accept
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        return None


# ── this machine's own addresses ────────────────────────────────────────────────────


class LocalAddresses:
    """The addresses of this machine's interfaces, read once and cached on this value.

    A public address on a local interface still reaches the host itself (a service bound
    to 0.0.0.0), so it is refused like loopback. Read without extra dependencies: Linux's
    `/proc/net/fib_trie` (IPv4 `LOCAL` routes) and `/proc/net/if_inet6`, else
    `ip -j addr`, and the addresses the host name resolves to."""

    __slots__ = ("_addresses", "_lock")

    def __init__(self, addresses: Iterable[str] | None = None) -> None:
        self._lock = threading.Lock()
        self._addresses: frozenset[IPAddress] | None = (
            None if addresses is None else frozenset(ipaddress.ip_address(a) for a in addresses)
        )

    def get(self) -> frozenset[IPAddress]:
        """The addresses (reads them the first time: blocking, see `aget`)."""
        with self._lock:
            if self._addresses is None:
                self._addresses = frozenset(_read_local_addresses())
            return self._addresses

    async def aget(self) -> frozenset[IPAddress]:
        """The addresses, read in a worker thread the first time (looking up the host's
        own name can wait on DNS; the event loop must not)."""
        cached = self._addresses
        return cached if cached is not None else await asyncio.to_thread(self.get)

    def __repr__(self) -> str:
        return "LocalAddresses()"


def _read_local_addresses() -> set[IPAddress]:
    found: set[IPAddress] = set()
    found |= _fib_trie_locals(Path("/proc/net/fib_trie"))
    found |= _if_inet6(Path("/proc/net/if_inet6"))
    if not found:
        found |= _ip_json_addresses()
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        infos = []
    for info in infos:
        try:
            found.add(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            continue
    return found


def _fib_trie_locals(path: Path) -> set[IPAddress]:
    """IPv4 addresses with a `/32 host LOCAL` route: the machine's own."""
    try:
        lines = path.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return set()
    found: set[IPAddress] = set()
    last: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(("|--", "+--")):
            last = stripped[3:].strip().split(" ", 1)[0]
        elif "host LOCAL" in stripped and last is not None:
            with contextlib.suppress(ValueError):
                found.add(ipaddress.ip_address(last))
    return found


def _if_inet6(path: Path) -> set[IPAddress]:
    try:
        lines = path.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return set()
    found: set[IPAddress] = set()
    for line in lines:
        digits = line.split(" ", 1)[0]
        if len(digits) == 32:
            try:
                found.add(ipaddress.IPv6Address(int(digits, 16)))
            except ValueError:
                continue
    return found


def _ip_json_addresses() -> set[IPAddress]:
    import orjson  # only where /proc is missing

    try:
        out = subprocess.run(
            ["ip", "-j", "addr"], capture_output=True, timeout=5, check=True
        ).stdout
        interfaces = orjson.loads(out)
    except (OSError, subprocess.SubprocessError, orjson.JSONDecodeError):
        return set()
    found: set[IPAddress] = set()
    for interface in interfaces if isinstance(interfaces, list) else []:
        for info in interface.get("addr_info", []) if isinstance(interface, dict) else []:
            try:
                found.add(ipaddress.ip_address(str(info.get("local", ""))))
            except (ValueError, AttributeError):
                continue
    return found


# ── the resolver seam ───────────────────────────────────────────────────────────────


async def system_resolve(host: str, port: int) -> Sequence[str]:
    """The addresses the system resolver gives for `host` (TCP), in its order."""
    event_loop = asyncio.get_running_loop()
    infos = await event_loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for info in infos:
        seen.setdefault(str(info[4][0]), None)
    return list(seen)


# ── the policy ──────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class HostRule:
    """One `allow_hosts` entry: a host name or address, and a port (`None`: any port)."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> HostRule:
        """`name`, `name:port`, `1.2.3.4`, `1.2.3.4:port`, `[::1]` or `[::1]:port`."""
        raw = text.strip()
        if not raw or "/" in raw or "@" in raw or " " in raw:
            raise ValueError(
                f"{text!r} is not a host; write a name or address with an optional port, "
                "such as 'intranet.example' or 'localhost:8080'"
            )
        if "*" in raw:
            raise ValueError(
                f"{text!r}: wildcards are not supported; list each host, or allow the "
                "hosts' addresses in allow_ranges"
            )
        host, port = raw, None
        if raw.startswith("["):
            close = raw.find("]")
            if close < 0:
                raise ValueError(f"{text!r}: an IPv6 address needs its closing ']'")
            host, rest = raw[1:close], raw[close + 1 :]
            if rest:
                if not rest.startswith(":"):
                    raise ValueError(f"{text!r}: expected ':port' after ']'")
                port = _port(rest[1:], text)
        elif raw.count(":") == 1:
            host, _, number = raw.partition(":")
            port = _port(number, text)
        elif raw.count(":") > 1:
            raise ValueError(f"{text!r}: write an IPv6 address in brackets, such as '[::1]:8080'")
        literal = host_literal(host)
        normal = str(literal) if literal is not None else host.lower().rstrip(".")
        if not normal:
            raise ValueError(f"{text!r} has no host")
        return cls(normal, port)

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        literal = host_literal(host)
        normal = str(literal) if literal is not None else host.lower().rstrip(".")
        return normal == self.host

    def __str__(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if self.port is None else f"{shown}:{self.port}"


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(text)


@dataclass(frozen=True, slots=True)
class WebAccess:
    """Where `web_fetch` may connect: public addresses, plus what a person allowed.

    ```python
    access = WebAccess.from_config({"allow_hosts": ["localhost:8080"]})
    addresses = await access.vet("localhost", 8080)  # the addresses to connect to
    ```

    - `allow_hosts`: hosts (optionally with a port) connected to wherever they resolve.
    - `allow_ranges`: networks whose addresses are allowed for any name.
    - `resolve`: how a name becomes addresses (`system_resolve`; tests give their own).
    - `local`: this machine's own addresses (`LocalAddresses`, read once).
    """

    allow_hosts: tuple[HostRule, ...] = ()
    allow_ranges: tuple[IPNetwork, ...] = ()
    resolve: Resolver = field(default=system_resolve, compare=False, repr=False)
    local: LocalAddresses = field(default_factory=LocalAddresses, compare=False, repr=False)

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> WebAccess:
        """The `[web]` table of `tiller.toml`; a `ValueError` names the bad entry."""
        unknown = sorted(set(section) - {"allow_hosts", "allow_ranges"})
        if unknown:
            raise ValueError(
                f"[web] has unknown key(s) {', '.join(unknown)}; the keys are: "
                "allow_hosts, allow_ranges"
            )
        hosts = _strings(section.get("allow_hosts", []), "allow_hosts")
        ranges = _strings(section.get("allow_ranges", []), "allow_ranges")
        parsed_ranges: list[IPNetwork] = []
        for entry in ranges:
            try:
                parsed_ranges.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError as exc:
                raise ValueError(
                    f"[web] allow_ranges: {entry!r} is not a CIDR range such as "
                    f"'10.1.0.0/16' or 'fd12::/64' ({exc})"
                ) from None
        try:
            rules = tuple(HostRule.parse(entry) for entry in hosts)
        except ValueError as exc:
            raise ValueError(f"[web] allow_hosts: {exc}") from None
        return cls(allow_hosts=rules, allow_ranges=tuple(parsed_ranges))

    def to_data(self) -> dict[str, list[str]]:
        """The allow lists as `[web]` would spell them (`from_config` reads it back), for
        a run's recorded policy."""
        return {
            "allow_hosts": [str(rule) for rule in self.allow_hosts],
            "allow_ranges": [str(network) for network in self.allow_ranges],
        }

    def with_resolver(self, resolve: Resolver) -> WebAccess:
        """The same policy, resolving names with `resolve`."""
        return WebAccess(self.allow_hosts, self.allow_ranges, resolve, self.local)

    def host_allowed(self, host: str, port: int) -> bool:
        return any(rule.matches(host, port) for rule in self.allow_hosts)

    def refusal(
        self, host: str, address: IPAddress, local: frozenset[IPAddress]
    ) -> PrivateDestination | None:
        """The refusal for connecting to `address` for `host` (`local`: this machine's
        addresses), or `None` if allowed."""
        if any(_in(address, network) for network in self.allow_ranges):
            return None
        reason = private_reason(address)
        if reason is None and address in local:
            reason = "it is an address of this machine"
        return None if reason is None else PrivateDestination(host, str(address), reason)

    async def vet_literal(self, host: str, port: int) -> None:
        """Refuse `host` now if it spells an address that is not allowed, or is a
        `localhost` name (no lookup: a program's own transport resolves names itself,
        but these need none)."""
        if self.host_allowed(host, port):
            return
        literal = host_literal(host)
        if literal is None and _is_localhost_name(host):
            literal = _LOOPBACK
        if literal is None:
            return
        refused = self.refusal(host, literal, await self.local.aget())
        if refused is not None:
            raise refused

    async def vet(self, host: str, port: int) -> list[IPAddress]:
        """The addresses to connect to for `host:port`, each one vetted; raises
        `PrivateDestination` if any address the name resolves to is refused (a name with
        one private address is not a public name), `ToolError` if it does not resolve."""
        literal = host_literal(host)
        if literal is not None:
            addresses = [literal]
        else:
            try:
                answers = await self.resolve(host, port)
            except OSError as exc:
                raise ToolError(f"could not resolve {host}: {exc}") from exc
            except UnicodeError as exc:  # the resolver's IDNA codec: not an OSError
                raise ToolError(
                    f"could not resolve {host}: it is not a valid host name (each label "
                    "between dots must be 1 to 63 characters); check the URL"
                ) from exc
            addresses = [a for a in (host_literal(str(text)) for text in answers) if a is not None]
            if not addresses:
                raise ToolError(f"could not resolve {host}: no addresses")
        if self.host_allowed(host, port):
            return addresses
        local = await self.local.aget()
        for address in addresses:
            refused = self.refusal(host, address, local)
            if refused is not None:
                raise refused
        return addresses


def _is_localhost_name(host: str) -> bool:
    """`localhost` and every name under it are loopback by definition (RFC 6761 6.3),
    whatever a resolver or a proxy would make of them."""
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


def _in(address: IPAddress, network: IPNetwork) -> bool:
    if address.version == network.version:
        return address in network
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped in network
    return False


def _strings(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"[web] {key} must be a list of strings")
    return list(value)


def port_of(scheme: str, port: int | None) -> int:
    """The port a URL connects to."""
    return port if port is not None else _DEFAULT_PORTS.get(scheme, 80)
