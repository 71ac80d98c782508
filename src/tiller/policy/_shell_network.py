"""Handlers for network clients and remote infrastructure: `curl`, `wget`, HTTPie,
`scp`/`rsync`, `kubectl`/`terraform`-style tools and container engines.

Reading from the network is `network`; sending data (a POST, an upload, a copy to a
remote, a change to shared infrastructure) is `external_access`, which always asks.
Containers are `process`: they start long-lived processes (and the daemon is root).
"""

from __future__ import annotations

import re
from typing import Final

from ._shell_argv import (
    BOOM,
    EXT,
    FILE,
    NET,
    PROC,
    READ,
    Env,
    Handler,
    Outcome,
    options,
    valued,
)
from ._shell_paths import write_verdict

__all__ = ["NETWORK_HANDLERS"]

_SAFE_METHODS: Final = frozenset({"", "GET", "HEAD", "OPTIONS"})
_REMOTE: Final = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|(?:[^@/:\s]+@)?[^/:\s]+::?)", re.IGNORECASE)


# ── network ──────────────────────────────────────────────────────────────────────


def _curl(name: str, args: list[str], env: Env) -> Outcome:
    sends = (
        "-d", "--data", "--data-binary", "--data-raw", "--data-ascii", "--data-urlencode",
        "--json", "-F", "--form", "--form-string", "-T", "--upload-file", "--mail-rcpt",
    )  # fmt: skip
    takes = valued(
        *sends, "-X", "--request", "-o", "--output", "-H", "--header", "-u", "--user", "-A",
        "--user-agent", "-e", "--referer", "-b", "--cookie", "-c", "--cookie-jar", "-K",
        "--config", "-x", "--proxy", "-m", "--max-time", "--connect-timeout", "-w",
        "--write-out", "-r", "--range", "-C", "--continue-at", "--retry", "--cacert", "--cert",
        "--key", "-E", "--resolve", "--url", "-U", "--proxy-user", "-z", "--time-cond",
        "--limit-rate", "--max-filesize", "--output-dir", "--variable", "--mail-from",
    )  # fmt: skip
    opts = options(args, takes)
    if opts.has("--version", "--help", "-V") and not opts.positional:
        return Outcome(READ, "prints curl's version or help")
    method = (opts.value("-X", "--request") or "").upper()
    if opts.has(*sends) or method not in _SAFE_METHODS:
        return Outcome(EXT, "sends data to another host (curl -d/-F/-T/-X)")
    if opts.has("-K", "--config"):
        return Outcome(EXT, "takes its options, perhaps an upload, from a file (curl -K)")
    result = Outcome(NET, "downloads from the network")
    for out in opts.values("-o", "--output"):
        result.raise_to(write_verdict(out, env))
    return result


def _wget(name: str, args: list[str], env: Env) -> Outcome:
    sends = ("--post-data", "--post-file", "--body-data", "--body-file")
    takes = valued(
        *sends, "-O", "--output-document", "-o", "--output-file", "-P", "--directory-prefix",
        "--method", "-U", "--user-agent", "--header", "-e", "--execute", "-i", "--input-file",
        "-t", "--tries", "-T", "--timeout", "--user", "--password", "-a", "--append-output",
    )  # fmt: skip
    opts = options(args, takes)
    method = (opts.value("--method") or "").upper()
    if opts.has(*sends) or method not in _SAFE_METHODS:
        return Outcome(EXT, "sends data to another host (wget --post-data/--method)")
    if opts.has("-e", "--execute"):
        return Outcome(EXT, "runs wgetrc commands, which can upload (wget -e)")
    result = Outcome(NET, "downloads from the network")
    for out in opts.values("-O", "--output-document"):
        result.raise_to(write_verdict(out, env))
    return result


def _httpie(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args, valued("-a", "--auth", "-o", "--output", "--session", "-A"))
    words = list(opts.positional)
    method = words.pop(0).upper() if words and words[0].isupper() else ""
    items = words[1:]
    data = [item for item in items if re.match(r"^[^=:@]+(:=|=|@)", item) and "==" not in item]
    if method not in _SAFE_METHODS or data or opts.has("-f", "--form", "--raw"):
        return Outcome(EXT, f"sends data to another host ({name})")
    return Outcome(NET, "downloads from the network")


def _remote_copy(name: str, args: list[str], env: Env) -> Outcome:
    takes = valued("-P", "-p", "-i", "-F", "-o", "-e", "--rsh", "-l", "-c", "-J", "-S")
    opts = options(args, takes)
    words = opts.positional
    if any(flag.startswith(("--del", "--remove-source-files")) for flag in opts.flags):
        return Outcome(BOOM, f"deletes files in bulk (`{name} --delete`, `--remove-source-files`)")
    remote = [w for w in words if _REMOTE.match(w) and not w.startswith(("/", ".", "~"))]
    if words and words[-1] in remote:
        return Outcome(EXT, f"copies to another machine ({name})")
    if remote:
        return Outcome(NET, f"copies from another machine ({name})")
    dest = words[-1:] if len(words) >= 2 else []
    result = Outcome(FILE, f"copies files ({name})")
    for target in dest:
        result.raise_to(write_verdict(target, env))
    return result


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_CLUSTER_OPTIONS: Final = valued(
    "-n", "--namespace", "--context", "-f", "--filename", "-o", "--output", "-l",
    "--selector", "-c", "--container", "--kubeconfig",
)  # fmt: skip
_CLUSTER_READS: Final = _words(
    "get describe logs top explain version api-resources cluster-info list status show history "
    "diff template plan validate output graph providers fmt preview whoami stack init search "
    "lint"
)
_CONTAINER_OPTIONS: Final = valued("-H", "--host", "--context", "-c", "--config", "-l")
_CONTAINER_READS: Final = _words("ps images logs inspect version info stats top history diff port")
_CONTAINER_OBJECTS: Final = _words("image container volume network")


def _cluster(name: str, args: list[str], env: Env) -> Outcome:
    """kubectl, helm, oc, terraform, tofu, pulumi: reads are network, the rest acts on
    shared infrastructure."""
    words = options(args, _CLUSTER_OPTIONS).positional
    verb = words[0] if words else ""
    if verb in _CLUSTER_READS or not verb:
        return Outcome(NET, f"reads from shared infrastructure (`{name} {verb}`)")
    return Outcome(EXT, f"changes shared infrastructure (`{name} {verb}`)")


def _container(name: str, args: list[str], env: Env) -> Outcome:
    """docker, podman, nerdctl: containers are processes (and the daemon is root)."""
    words = options(args, _CONTAINER_OPTIONS).positional
    verb = words[0] if words else ""
    if verb in _CONTAINER_READS or not verb:
        return Outcome(READ, f"reads container state (`{name} {verb}`)")
    if verb in _CONTAINER_OBJECTS and words[1:2] in (["ls"], ["list"], ["inspect"]):
        return Outcome(READ, f"lists {verb}s")
    if verb in ("pull", "search"):
        return Outcome(NET, "downloads images")
    if verb in ("push", "login"):
        return Outcome(EXT, f"sends to a registry (`{name} {verb}`)")
    return Outcome(PROC, f"runs or changes containers (`{name} {verb}`)")


NETWORK_HANDLERS: Final[dict[str, Handler]] = {
    "curl": _curl,
    "wget": _wget,
    **dict.fromkeys(("http", "https", "xh", "xhs"), _httpie),
    **dict.fromkeys(("scp", "rsync"), _remote_copy),
    **dict.fromkeys(("kubectl", "helm", "oc", "terraform", "tofu", "pulumi"), _cluster),
    **dict.fromkeys(("docker", "podman", "nerdctl"), _container),
}
