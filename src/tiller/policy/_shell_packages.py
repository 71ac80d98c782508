"""Handlers for package managers and build tools.

Installing for the machine or the user (`apt`, `brew`, `pip install` — even in a
virtualenv, which tiller cannot tell —, `npm install -g`, `cargo install`, `go install`,
`make install`) is `system_install`, which always asks. Installing into the project
(`npm install`, `uv add`, `poetry install`) downloads and runs install scripts: `network`.
Publishing is `external_access`; queries only read; builds and test runs are shell
mutations.
"""

from __future__ import annotations

from typing import Final

from ._shell_argv import (
    EXT,
    FILE,
    NET,
    PROC,
    READ,
    SHELL,
    SYS,
    Env,
    Handler,
    Opts,
    Outcome,
    options,
    valued,
)

__all__ = ["PACKAGE_HANDLERS", "pip_risk"]

_READ_VERBS: Final = frozenset(
    {
        "list", "ls", "info", "search", "show", "query", "provides", "whatprovides",
        "repolist", "check-update", "history", "deps", "uses", "leaves", "outdated", "doctor",
        "config", "help", "desc", "home", "log", "options", "list-installed", "repoquery",
        "policy", "depends", "rdepends", "showsrc", "madison", "changelog", "status", "view",
        "why", "explain", "freeze", "check", "inspect", "debug", "env", "version",
    }
)  # fmt: skip
_QUERY_FLAGS: Final = (
    "-l", "-L", "-s", "-S", "-q", "-p", "--list", "--listfiles", "--status", "--search",
    "--query", "--print-architecture", "--get-selections",
)  # fmt: skip
_PIP_OPTIONS: Final = valued(
    "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-t", "--target", "-i",
    "--index-url", "--extra-index-url", "--prefix", "--root", "--python", "-f", "--find-links",
)  # fmt: skip


def _queries(name: str, verb: str, opts: Opts) -> bool:
    """Whether a system package manager only looks (lists, searches, shows)."""
    if name in ("pacman", "yay", "paru"):
        flags = "".join(flag[1:] for flag in opts.flags if len(flag) == 2)
        return "Q" in flags or "F" in flags or ("S" in flags and ("s" in flags or "i" in flags))
    if name in ("dpkg", "rpm", "nix-env"):
        return opts.has(*_QUERY_FLAGS)
    if name == "apt-get":
        return verb == "check"
    return verb in _READ_VERBS or (not verb and opts.has("--version", "-v", "--help", "-h"))


def _system_packages(name: str, args: list[str], env: Env) -> Outcome:
    """apt, dnf, brew, ...: queries read; everything else changes the machine."""
    if not args:
        return Outcome(READ, f"`{name}` alone prints its help")
    opts = options(args, valued("-o", "-c", "-t", "--target-release", "-C"))
    verb = opts.positional[0] if opts.positional else ""
    by_flags = name in ("pacman", "yay", "paru", "dpkg", "rpm", "nix-env")
    shown = f"`{name} {verb}`" if verb and not by_flags else f"`{name}`"
    if _queries(name, verb, opts):
        return Outcome(READ, f"queries packages ({shown})")
    if name == "brew" and verb == "services":
        return Outcome(PROC, "starts or stops services (`brew services`)")
    if name == "apt-get" and verb in ("changelog", "download", "source"):
        return Outcome(NET, f"downloads without installing ({shown})")
    return Outcome(SYS, f"changes the machine's packages ({shown})")


def pip_risk(name: str, args: list[str], env: Env) -> Outcome:
    """pip (also `python -m pip` and `uv pip`): every install is a system install."""
    opts = options(args, _PIP_OPTIONS)
    verb = opts.positional[0] if opts.positional else ""
    if verb in ("install", "uninstall"):
        return Outcome(
            SYS, f"`pip {verb}` changes installed packages (a system install, even in a virtualenv)"
        )
    if verb in ("download", "wheel", "index", "search"):
        return Outcome(NET, f"`pip {verb}` downloads packages")
    if verb in _READ_VERBS or (verb in ("", "cache") and opts.positional[1:2] != ["purge"]):
        return Outcome(READ, f"`pip {verb}` only reads")
    return Outcome(SHELL, f"`pip {verb}` is not a pip command tiller knows")


def _uv(name: str, args: list[str], env: Env) -> Outcome:
    words = options(
        args, valued("-p", "--python", "--directory", "--project"), first=True
    ).positional
    verb = words[0] if words else ""
    if name == "uvx" or words[:2] == ["tool", "run"]:
        return Outcome(NET, "downloads (if needed) and runs a tool")
    if verb == "pip":
        return pip_risk("pip", words[1:], env)
    if verb in ("tool", "python") and words[1:2] in (["install"], ["uninstall"], ["upgrade"]):
        return Outcome(SYS, f"`uv {verb} {words[1]}` installs for the whole user")
    if verb in ("add", "remove", "sync", "lock", "export", "tree", "init"):
        return Outcome(NET, f"`uv {verb}` changes the project's environment, downloading packages")
    if verb in ("venv",):
        return Outcome(FILE, "creates a virtual environment")
    if verb in ("version", "help", "") or verb.startswith("-"):
        return Outcome(READ, "prints uv's version or help")
    return Outcome(SHELL, f"`uv {verb}` runs project code")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_JS_INSTALLS: Final = _words(
    "install i add ci update up upgrade uninstall remove rm un r link ln in isntall dedupe"
)
_JS_PUBLISH: Final = _words(
    "publish unpublish deprecate dist-tag owner access adduser login token team"
)
_JS_REGISTRY: Final = _words("view info show v outdated search s audit fund docs repo bugs")
_JS_LOCAL: Final = _words("ls list ll la explain why root bin prefix help query config get")
_JS_RUN_PACKAGE: Final = _words("exec x dlx create init")


def _js_packages(name: str, args: list[str], env: Env) -> Outcome:
    """npm, pnpm, yarn, bun."""
    takes = valued("--prefix", "-w", "--workspace", "--registry", "--location", "-C", "--cwd")
    opts = options(args, takes)
    words = opts.positional
    is_global = opts.has("-g", "--global") or opts.value("--location") == "global"
    if words[:1] == ["global"]:  # yarn global add
        is_global, words = True, words[1:]
    verb = words[0] if words else ("install" if name in ("yarn", "pnpm", "bun") else "")
    shown = f"`{name} {verb}`" if verb else f"`{name}`"
    if verb in _JS_INSTALLS:
        if is_global:
            return Outcome(SYS, f"installs packages for the whole machine ({shown} -g)")
        return Outcome(
            NET, f"installs packages into the project ({shown}), running their install scripts"
        )
    if verb in _JS_PUBLISH:
        return Outcome(EXT, f"publishes to the package registry ({shown})")
    if verb in _JS_REGISTRY:
        return Outcome(NET, f"reads from the package registry ({shown})")
    if verb in _JS_LOCAL or (not verb and opts.has("-v", "--version", "--help", "-h")):
        return Outcome(READ, f"only reads ({shown})")
    if verb in _JS_RUN_PACKAGE:
        return Outcome(NET, f"downloads (if needed) and runs a package ({shown})")
    return Outcome(SHELL, f"runs project scripts ({shown})")


_LANGUAGE_SYSTEM: Final[dict[str, frozenset[str]]] = {
    "cargo": frozenset({"install", "uninstall"}),
    "go": frozenset({"install"}),
    "gem": frozenset({"install", "uninstall", "update", "cleanup"}),
    "pipx": _words(
        "install uninstall upgrade upgrade-all inject reinstall reinstall-all ensurepath "
        "uninstall-all"
    ),
    **dict.fromkeys(
        ("conda", "mamba", "micromamba"),
        frozenset({"install", "remove", "uninstall", "update", "upgrade", "create", "env"}),
    ),
    "composer": frozenset({"global"}),
}
_LANGUAGE_PUBLISH: Final = frozenset({"publish", "yank", "owner", "login", "push", "upload"})
_LANGUAGE_NETWORK: Final = _words(
    "add fetch update search get download generate-lockfile install lock require run bundle"
)
_LANGUAGE_READ: Final = _words("list info show version env help doc metadata tree")


def _language_packages(name: str, args: list[str], env: Env) -> Outcome:
    """cargo, go, gem, bundle, poetry, pipx, conda, mamba, composer."""
    takes = valued("-p", "--package", "--manifest-path", "-n", "--name", "-c", "--channel", "-C")
    words = options(args, takes).positional
    verb = words[0] if words else ""
    shown = f"`{name} {verb}`" if verb else f"`{name}`"
    if verb in _LANGUAGE_SYSTEM.get(name, frozenset()):
        return Outcome(SYS, f"installs for the whole machine or user ({shown})")
    if verb in _LANGUAGE_PUBLISH:
        return Outcome(EXT, f"publishes to a registry ({shown})")
    if name == "go" and words[:2] == ["mod", "download"]:
        return Outcome(NET, "downloads modules")
    if verb in _LANGUAGE_READ or not words:
        return Outcome(READ, f"only reads ({shown})")
    if verb in _LANGUAGE_NETWORK:
        return Outcome(NET, f"downloads packages ({shown})")
    return Outcome(SHELL, f"builds or runs project code ({shown})")


def _build(name: str, args: list[str], env: Env) -> Outcome:
    """make, cmake, ninja, meson: an `install` target installs into the system."""
    opts = options(
        args, valued("-C", "-f", "--file", "-j", "--jobs", "-B", "-S", "--build", "--target", "-t")
    )
    targets = [*opts.positional, *opts.values("--target")]
    if "install" in targets or "uninstall" in targets or opts.has("--install"):
        return Outcome(SYS, f"installs into the system (`{name} install`)")
    if set(opts.values("-f", "--file")) & _STDIN:
        return Outcome(SHELL, f"runs build rules read from its input ({name})", reads_script=True)
    return Outcome(SHELL, f"runs build rules ({name}), which can run anything")


#: Names of the standard input, as a file argument.
_STDIN: Final = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})


_SYSTEM_MANAGERS: Final = (
    "apt", "apt-get", "aptitude", "dpkg", "rpm", "yum", "dnf", "zypper", "apk", "pacman", "yay",
    "paru", "port", "brew", "snap", "flatpak", "nix-env", "emerge", "pkg", "xbps-install",
)  # fmt: skip
_LANGUAGE_MANAGERS: Final = (
    "cargo", "go", "gem", "pipx", "conda", "mamba", "micromamba", "composer", "bundle",
    "bundler", "poetry",
)  # fmt: skip

PACKAGE_HANDLERS: Final[dict[str, Handler]] = {
    **dict.fromkeys(_SYSTEM_MANAGERS, _system_packages),
    **dict.fromkeys(_LANGUAGE_MANAGERS, _language_packages),
    **dict.fromkeys(("npm", "pnpm", "yarn", "bun"), _js_packages),
    **dict.fromkeys(("make", "gmake", "cmake", "ninja", "meson"), _build),
    "pip": pip_risk,
    "uv": _uv,
    "uvx": _uv,
}
