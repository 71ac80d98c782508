"""`web_fetch` refuses private destinations: every spelling of loopback, names that resolve
to it, redirects to it, metadata addresses, and this machine's own addresses; it connects to
the address it vetted; a person's `[web]` allow lists open exactly what they name.

Real local HTTP servers on 127.0.0.1 (and ::1 where the machine has it) stand in for the
services a fetch must not reach: a refused fetch is one the server never saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpcore
import httpx
import orjson
import pytest

from tiller.conversation import ToolCall
from tiller.tools import ExecContext, Execution, Jail, Outcome, Registry
from tiller.tools.builtin import web_fetch

# Imported where used: on a tiller without the web policy these tests still run (and
# fail) instead of the whole file failing to import.


class Server:
    """A one-route HTTP/1.1 server: answers every request with `status` (and `location`),
    counting hits. Binds `host` on an ephemeral port."""

    def __init__(self, host: str = "127.0.0.1", status: int = 200, location: str = "") -> None:
        self.host = host
        self.status = status
        self.location = location
        self.hits = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._handle, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readline() not in (b"\r\n", b""):
                pass
            self.hits += 1
            body = b"secret admin page"
            head = [f"HTTP/1.1 {self.status} X", f"Content-Length: {len(body)}"]
            head += ["Content-Type: text/plain", "Connection: close"]
            if self.location:
                head.append(f"Location: {self.location}")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with Server() as running:
        yield running


REGISTRY = Registry([web_fetch])


async def fetch(ctx: ExecContext, url: str) -> Execution:
    call = ToolCall(id="call-1", name="web_fetch", arguments=orjson.dumps({"url": url}).decode())
    async with asyncio.timeout(20):  # a hang guard, not a timing assertion
        return await REGISTRY.execute(call, ctx)


def with_web(tmp_path: Path, web: Any = None) -> ExecContext:
    tools = Jail(tmp_path) if web is None else Jail(tmp_path, web=web)
    return ExecContext.for_test(tmp_path, jail=tools)


def resolver(answers: Mapping[str, Sequence[str]], calls: list[str] | None = None) -> Any:
    """A resolver seam: `answers` by name, recording each lookup in `calls`."""

    async def resolve(host: str, port: int) -> Sequence[str]:
        if calls is not None:
            calls.append(host)
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers[host]

    return resolve


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


# ── every spelling of loopback, refused before a byte is sent ──────────────────────

SPELLINGS = [
    ("127.0.0.1", "127.0.0.1: loopback addresses are private"),
    ("localhost", "localhost (127.0.0.1): loopback addresses are private"),
    ("2130706433", "2130706433 (127.0.0.1): loopback addresses are private"),
    ("127.1", "127.1 (127.0.0.1): loopback addresses are private"),
    ("0x7f.1", "0x7f.1 (127.0.0.1): loopback addresses are private"),
    ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1 (::ffff:7f00:1): it wraps 127.0.0.1, and loopback"),
]


@pytest.mark.parametrize(("host", "says"), SPELLINGS, ids=[s[0] for s in SPELLINGS])
async def test_every_spelling_of_loopback_is_refused(
    tmp_path: Path, server: Server, host: str, says: str
) -> None:
    done = await fetch(with_web(tmp_path), f"http://{host}:{server.port}/admin")
    assert done.outcome is Outcome.ERROR
    assert done.result.content.startswith(f"web_fetch refuses {says}")
    assert "a person can allow it in tiller.toml [web] allow_hosts" in done.result.content
    assert server.hits == 0


@pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback here")
async def test_ipv6_loopback_is_refused(tmp_path: Path) -> None:
    async with Server("::1") as six:
        done = await fetch(with_web(tmp_path), f"http://[::1]:{six.port}/")
        assert done.result.content.startswith(
            "web_fetch refuses ::1: loopback addresses are private"
        )
        assert six.hits == 0


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254: it is a cloud metadata"),
        ("http://[fd00:ec2::254]/", "fd00:ec2::254: it is a cloud metadata address"),
        ("http://168.63.129.16/", "168.63.129.16: it is a cloud metadata address"),
        ("http://10.0.0.1/", "10.0.0.1: private-network addresses are private"),
        ("http://192.168.1.1/", "192.168.1.1: private-network addresses are private"),
        ("http://172.16.0.1/", "172.16.0.1: private-network addresses are private"),
        ("http://100.64.0.1/", "100.64.0.1: shared (carrier-grade NAT) addresses"),
        ("http://169.254.1.1/", "169.254.1.1: link-local addresses are private"),
        ("http://[fe80::1]/", "fe80::1: link-local addresses are private"),
        ("http://[fc00::1]/", "fc00::1: unique-local addresses are private"),
        ("http://0.0.0.0/", "0.0.0.0: unspecified"),
        ("http://224.0.0.1/", "224.0.0.1: multicast addresses are not destinations"),
        ("http://255.255.255.255/", "255.255.255.255: the broadcast address"),
        ("http://[64:ff9b::a9fe:a9fe]/", "64:ff9b::a9fe:a9fe: it wraps 169.254.169.254"),
        ("http://[2002:a00:1::]/", "2002:a00:1::: it wraps 10.0.0.1, and private-network"),
    ],
)
async def test_private_and_metadata_addresses_are_refused(
    tmp_path: Path, url: str, says: str
) -> None:
    done = await fetch(with_web(tmp_path), url)
    assert done.outcome is Outcome.ERROR
    assert done.result.content.startswith(f"web_fetch refuses {says}")


# ── names: resolved once, every address vetted, the vetted one connected to ──────────


async def test_a_public_looking_name_that_resolves_to_loopback_is_refused(
    tmp_path: Path, server: Server
) -> None:
    from tiller.tools import WebAccess

    calls: list[str] = []
    web = WebAccess().with_resolver(resolver({"evil.example": ["127.0.0.1"]}, calls))
    done = await fetch(with_web(tmp_path, web), f"http://evil.example:{server.port}/")
    assert done.result.content.startswith(
        "web_fetch refuses evil.example (127.0.0.1): loopback addresses are private"
    )
    assert calls == ["evil.example"]
    assert server.hits == 0


async def test_one_private_address_among_public_ones_refuses_the_name(tmp_path: Path) -> None:
    from tiller.tools import WebAccess

    answers = {"mixed.example": ["93.184.215.14", "10.0.0.7"]}
    web = WebAccess().with_resolver(resolver(answers))
    done = await fetch(with_web(tmp_path, web), "https://mixed.example/")
    assert done.result.content.startswith(
        "web_fetch refuses mixed.example (10.0.0.7): private-network addresses are private"
    )


class Recorder(httpcore.AsyncNetworkBackend):
    """An inner backend that records where it was asked to connect, and the time it was
    given, then fails; `cost` is how far each attempt moves the fake clock."""

    def __init__(self, clock: list[float], cost: float = 0.0) -> None:
        self.seen: list[tuple[str, int, float | None]] = []
        self._clock = clock
        self._cost = cost

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.seen.append((host, port, timeout))
        self._clock[0] += self._cost
        raise httpcore.ConnectError("refused by the recorder")


async def test_the_connection_goes_to_the_vetted_address_not_the_name() -> None:
    from tiller.tools import WebAccess
    from tiller.tools._vetted_network import VettedBackend

    calls: list[str] = []
    # A rebinding resolver: public on the first answer, loopback on any later one.
    answers = iter([["93.184.215.14"], ["127.0.0.1"]])

    async def rebinding(host: str, port: int) -> Sequence[str]:
        calls.append(host)
        return next(answers)

    inner = Recorder([0.0])
    backend = VettedBackend(WebAccess().with_resolver(rebinding), inner=inner, clock=lambda: 0.0)
    with pytest.raises(httpcore.ConnectError):
        await backend.connect_tcp("rebind.example", 443, timeout=5)
    assert calls == ["rebind.example"]  # resolved once
    assert inner.seen == [("93.184.215.14", 443, 5.0)]  # the socket gets the address


async def test_all_addresses_of_a_name_share_one_connect_timeout() -> None:
    from tiller.tools import WebAccess
    from tiller.tools._vetted_network import VettedBackend

    clock = [100.0]
    many = [f"93.184.215.{n}" for n in range(1, 21)]  # twenty dead A records
    web = WebAccess().with_resolver(resolver({"slow.example": many}))
    inner = Recorder(clock, cost=0.4)
    backend = VettedBackend(web, inner=inner, clock=lambda: clock[0])
    with pytest.raises(httpcore.ConnectTimeout):
        await backend.connect_tcp("slow.example", 80, timeout=1.0)
    timeouts = [t for _, _, t in inner.seen]
    assert timeouts == pytest.approx([1.0, 0.6, 0.2])  # not 20 times 1.0


# ── redirects: every hop vetted ───────────────────────────────────────────────────────


async def test_a_redirect_from_an_allowed_host_to_another_loopback_port_is_refused(
    tmp_path: Path,
) -> None:
    from tiller.tools import HostRule, WebAccess

    async with Server() as hidden:
        target = f"http://127.0.0.1:{hidden.port}/admin"
        async with Server(status=302, location=target) as allowed:
            web = WebAccess(allow_hosts=(HostRule.parse(f"127.0.0.1:{allowed.port}"),))
            done = await fetch(with_web(tmp_path, web), f"http://127.0.0.1:{allowed.port}/go")
            assert allowed.hits == 1  # the allowed host is fetched
        assert done.outcome is Outcome.ERROR
        assert done.result.content.startswith(
            f"web_fetch refuses 127.0.0.1 (a redirect from http://127.0.0.1:{allowed.port}/go "
            "led there): loopback addresses are private"
        )
        assert hidden.hits == 0


async def test_a_redirect_to_metadata_is_refused_even_through_a_program_transport(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(302, headers={"Location": "http://169.254.169.254/latest/"})

    ctx = ExecContext.for_test(tmp_path, config={"http_transport": httpx.MockTransport(handle)})
    done = await fetch(ctx, "https://public.example/")
    assert done.result.content.startswith(
        "web_fetch refuses 169.254.169.254 (a redirect from https://public.example/ led "
        "there): it is a cloud metadata address"
    )
    assert seen == ["https://public.example/"]


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST.", "admin.localhost"])
async def test_localhost_names_are_refused_even_through_a_program_transport(
    tmp_path: Path, host: str
) -> None:
    # A program's transport resolves names itself, but `localhost` and `*.localhost` are
    # loopback by definition (RFC 6761): refused before the transport sees them.
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text="secret admin page")

    ctx = ExecContext.for_test(tmp_path, config={"http_transport": httpx.MockTransport(handle)})
    done = await fetch(ctx, f"http://{host}/admin")
    assert done.outcome is Outcome.ERROR
    assert done.result.content.startswith(
        f"web_fetch refuses {host.lower()} (127.0.0.1): loopback addresses are private"
    )
    assert seen == []


# ── what a person allows ──────────────────────────────────────────────────────────────


async def test_allowed_hosts_and_ranges_are_fetched(tmp_path: Path, server: Server) -> None:
    from tiller.tools import WebAccess

    by_host = WebAccess.from_config({"allow_hosts": [f"localhost:{server.port}"]})
    done = await fetch(with_web(tmp_path, by_host), f"http://localhost:{server.port}/")
    assert done.outcome is Outcome.OK and done.result.content.endswith("secret admin page")

    other_port = WebAccess.from_config({"allow_hosts": [f"localhost:{server.port + 1}"]})
    done = await fetch(with_web(tmp_path, other_port), f"http://localhost:{server.port}/")
    assert done.result.content.startswith("web_fetch refuses localhost (127.0.0.1)")

    by_range = WebAccess.from_config({"allow_ranges": ["127.0.0.0/8"]})
    web = by_range.with_resolver(resolver({"intranet.example": ["127.0.0.1"]}))
    done = await fetch(with_web(tmp_path, web), f"http://intranet.example:{server.port}/")
    assert done.outcome is Outcome.OK
    assert server.hits == 2


async def test_environment_proxies_are_not_used(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy would make the connection the check vetted; `.netrc` would hand the user's
    credentials to hosts the model chose."""
    from tiller.tools import WebAccess

    async with Server() as proxy:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        web = WebAccess.from_config({"allow_hosts": ["127.0.0.1"]})
        done = await fetch(with_web(tmp_path, web), f"http://127.0.0.1:{server.port}/")
        assert done.outcome is Outcome.OK
        assert (server.hits, proxy.hits) == (1, 0)


@pytest.mark.parametrize("host", ["a" * 64 + ".example", "a..example"], ids=["long", "empty"])
async def test_a_name_the_resolver_cannot_encode_is_a_clear_error(
    tmp_path: Path, host: str
) -> None:
    # The system resolver encodes names with the IDNA codec, which raises UnicodeError
    # (not OSError) for a label over 63 characters or an empty one: that must be a tool
    # error the model can act on, not a crash.
    done = await fetch(with_web(tmp_path), f"http://{host}/")
    assert done.outcome is Outcome.ERROR
    assert done.result.content.startswith(f"could not resolve {host}: it is not a valid host name")


async def test_this_machines_own_addresses_are_refused(tmp_path: Path) -> None:
    from tiller.tools import LocalAddresses, WebAccess

    web = WebAccess(local=LocalAddresses(["93.184.215.99"]))  # as if it were ours
    done = await fetch(with_web(tmp_path, web), "http://93.184.215.99/")
    assert done.result.content.startswith(
        "web_fetch refuses 93.184.215.99: it is an address of this machine"
    )


def test_the_machines_addresses_are_read() -> None:
    from tiller.tools import LocalAddresses

    found = LocalAddresses().get()
    assert {str(a) for a in found} & {"127.0.0.1", "::1"}


# ── `[web]` in tiller.toml ────────────────────────────────────────────────────────────


def test_the_web_section_is_parsed_and_applied(tmp_path: Path) -> None:
    from tiller.config import TillerConfig
    from tiller.loop import RunContext

    config = TillerConfig.from_mapping(
        {
            "web": {
                "allow_hosts": ["Intranet.Example", "localhost:8080", "[::1]:9000"],
                "allow_ranges": ["10.1.0.0/16", "fd12::/64"],
            }
        }
    )
    assert config.web is not None
    assert [str(rule) for rule in config.web.allow_hosts] == [
        "intranet.example",
        "localhost:8080",
        "[::1]:9000",
    ]
    applied = config.apply(RunContext.sandboxed(tmp_path))
    assert applied.jail.web == config.web
    assert applied.jail.sandboxed(tmp_path).web == config.web  # subagents keep it


@pytest.mark.parametrize(
    ("section", "says"),
    [
        ({"allow_hosts": "intranet"}, "[web] allow_hosts must be a list of strings"),
        ({"allow_hosts": ["http://x/"]}, "[web] allow_hosts: 'http://x/' is not a host"),
        ({"allow_hosts": ["x:99999"]}, "the port must be a number from 1 to 65535"),
        ({"allow_hosts": ["::1"]}, "write an IPv6 address in brackets"),
        ({"allow_hosts": ["*.corp.example"]}, "wildcards are not supported"),
        ({"allow_ranges": ["10.1/16"]}, "[web] allow_ranges: '10.1/16' is not a CIDR range"),
        ({"allow": []}, "[web] has unknown key(s) allow"),
    ],
)
def test_mistakes_in_the_web_section_are_clear(section: dict[str, Any], says: str) -> None:
    from tiller.config import ConfigError, TillerConfig

    with pytest.raises(ConfigError) as caught:
        TillerConfig.from_mapping({"web": section}, path=Path("/p/tiller.toml"))
    assert str(caught.value).startswith("/p/tiller.toml: ")
    assert says in str(caught.value)


# ── TLS: the name is kept for SNI and the certificate, the address is the vetted one ──


def certificate_authority(tmp_path: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A test CA and a certificate for `name` signed by it: (server context, client
    context trusting only that CA)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tiller test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    cert_file, key_file = tmp_path / "leaf.pem", tmp_path / "leaf.key"
    cert_file.write_bytes(leaf.public_bytes(pem))
    key_file.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cadata=ca.public_bytes(pem).decode())
    return server, client


class TlsServer(Server):
    """`Server` over TLS; records the SNI name and `Host` header it was sent."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self.sni: list[str | None] = []
        self.hosts: list[str] = []
        context.sni_callback = lambda sock, name, ctx: self.sni.append(name)
        self._context = context

    async def __aenter__(self) -> TlsServer:
        self._server = await asyncio.start_server(
            self._handle_tls, "127.0.0.1", 0, ssl=self._context
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _handle_tls(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"host:"):
                    self.hosts.append(line[5:].strip().decode())
            self.hits += 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()


async def test_https_keeps_the_name_for_sni_host_and_certificate(tmp_path: Path) -> None:
    from tiller.tools import VettedTransport, WebAccess

    server_tls, client_tls = certificate_authority(tmp_path, "secure.example")
    web = WebAccess.from_config({"allow_ranges": ["127.0.0.1/32"]})
    web = web.with_resolver(
        resolver({"secure.example": ["127.0.0.1"], "other.example": ["127.0.0.1"]})
    )
    async with TlsServer(server_tls) as tls:
        transport = VettedTransport(web, ssl_context=client_tls)
        async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
            async with asyncio.timeout(10):  # hang guard
                response = await client.get(f"https://secure.example:{tls.port}/")
                assert response.text == "ok"
                # The same address under a name the certificate does not cover fails.
                with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await client.get(f"https://other.example:{tls.port}/")
        assert tls.sni[0] == "secure.example"
        assert tls.hosts == [f"secure.example:{tls.port}"]


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "2001:4860:4860::8888", "64:ff9b::808:808", "2002:808:808::1"]
)
def test_public_addresses_and_their_ipv6_forms_pass(address: str) -> None:
    import ipaddress

    from tiller.tools._web_access import private_reason

    assert private_reason(ipaddress.ip_address(address)) is None


def test_teredo_is_refused_it_can_reach_any_ipv4_host() -> None:
    import ipaddress

    from tiller.tools._web_access import private_reason

    reason = private_reason(ipaddress.ip_address("2001:0:4136:e378:8000:63bf:3fff:fdd2"))
    assert reason == "Teredo tunnel addresses can reach any IPv4 host"


def test_the_allow_lists_are_recorded_with_the_run_and_restored_on_resume(
    tmp_path: Path,
) -> None:
    """A resume (`tiller approve`, `tiller runs resume`) rebuilds the run's context from
    its checkpoint: the person's allow lists come back, and an old checkpoint without
    them gets public addresses only."""
    from tiller.loop import RunContext, run_context_from
    from tiller.loop._agent_ref import policy_of
    from tiller.state import RunState
    from tiller.tools import WebAccess

    web = WebAccess.from_config(
        {"allow_hosts": ["localhost:8080", "[::1]"], "allow_ranges": ["10.1.0.0/16"]}
    )
    run_ctx = RunContext.sandboxed(tmp_path).with_jail(Jail(tmp_path, web=web))
    state = RunState(run_id="run-1", thread_id="thread-1")
    state.policy = policy_of(run_ctx)
    assert state.policy["web"] == {
        "allow_hosts": ["localhost:8080", "[::1]"],
        "allow_ranges": ["10.1.0.0/16"],
    }
    assert run_context_from(state, store=None).jail.web == web
    del state.policy["web"]
    assert run_context_from(state, store=None).jail.web == WebAccess()
