"""Handlers for programs that reach past the workspace: network clients, package
managers, process and service control, system administration, interpreters and shells.

See `_shell_commands` for the risk each family gets and why.
"""

from __future__ import annotations

import posixpath
import re
from typing import Final

from ._shell_argv import (
    BOOM,
    EXT,
    PROC,
    READ,
    SHELL,
    SYS,
    Env,
    Handler,
    Nested,
    Outcome,
    command_in_variable,
    dangerous_assignment,
    options,
    valued,
)
from ._shell_packages import pip_risk
from ._shell_paths import Verdict

__all__ = ["PROGRAM_HANDLERS", "code_risk", "interpreter_name", "is_shell"]

# ── processes, services, the system ──────────────────────────────────────────────


def _kill(name: str, args: list[str], env: Env) -> Outcome:
    if not args or args[0] in ("-l", "-L", "--list", "--table"):
        return Outcome(READ, "lists signals")
    rest = list(args)
    signal = ""
    if rest[0] in ("-s", "-n", "--signal") and len(rest) > 1:
        signal, rest = rest[1], rest[2:]
    elif rest[0].startswith("-") and rest[0] != "--":
        signal, rest = rest[0][1:], rest[1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if signal == "0":
        return Outcome(READ, "checks that a process exists (kill -0)")
    if any(target in ("-1", "1") for target in rest):
        return Outcome(BOOM, "signals every process (or init)")
    return Outcome(PROC, f"signals processes ({name})")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_SERVICE_OPTIONS: Final = valued(
    "-t", "--type", "-p", "--property", "-H", "--host", "-M", "-n", "--lines", "-o", "--output"
)
_SERVICE_READS: Final = _words(
    "status show cat list-units list-unit-files list-timers list-sockets list-jobs "
    "list-dependencies is-active is-enabled is-failed help list print"
)
_POWER: Final = _words(
    "poweroff reboot halt kexec suspend hibernate hybrid-sleep soft-reboot rescue emergency"
)


def _systemctl(name: str, args: list[str], env: Env) -> Outcome:
    words = options(args, _SERVICE_OPTIONS).positional
    verb = words[0] if words else "list-units"
    if name == "service":
        verb = words[1] if len(words) > 1 else ("status" if args[:1] == ["--status-all"] else "")
    if verb in _SERVICE_READS:
        return Outcome(READ, f"reads service state (`{name} {verb}`)")
    if verb in _POWER:
        return Outcome(SYS, f"powers the machine down or restarts it (`{name} {verb}`)")
    return Outcome(PROC, f"starts, stops or changes services (`{name} {verb}`)")


def _scheduler(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args, valued("-u", "-t", "-S", "-L"))
    if name == "crontab" and opts.has("-l"):
        return Outcome(READ, "lists scheduled commands")
    if name in ("tmux", "screen"):
        verb = opts.positional[0] if opts.positional else ""
        if opts.has("-ls", "-list", "-l") or verb.startswith(
            ("ls", "list-", "has-session", "display-message", "show-", "capture-pane")
        ):
            return Outcome(READ, f"lists {name} sessions")
        return Outcome(PROC, f"starts or drives {name} sessions that outlive the command")
    if name in ("atq",):
        return Outcome(READ, "lists scheduled jobs")
    return Outcome(PROC, f"schedules or controls processes ({name})")


_CONFIG_CHANGES: Final = _words(
    "add del delete set flush change replace append up down -w --write -s --set"
)


def _net_config(name: str, args: list[str], env: Env) -> Outcome:
    """ip, ifconfig, hostname, sysctl, date, hwclock: reading is harmless, setting
    changes the machine."""
    positional = options(args).positional
    setting = {
        "ifconfig": len(positional) > 1,
        "hostname": bool(positional),
        "sysctl": any("=" in arg for arg in args) or "-w" in args,
        "date": any(arg in ("-s", "--set") or arg.startswith("--set=") for arg in args),
        "hwclock": any(arg in ("-w", "--systohc", "--set", "-s", "--hctosys") for arg in args),
    }.get(name, any(arg in _CONFIG_CHANGES for arg in args))
    if setting:
        return Outcome(SYS, f"changes the machine's configuration ({name})")
    return Outcome(READ, f"reads the machine's configuration ({name})")


# ── code: interpreters, shells, eval ─────────────────────────────────────────────

_INTERPRETERS: Final[dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    # name: (options taking a value, options whose value is code)
    "python": (valued("-c", "-m", "-W", "-X", "--check-hash-based-pycs"), valued("-c")),
    "pypy": (valued("-c", "-m", "-W", "-X"), valued("-c")),
    "node": (
        valued("-e", "--eval", "-p", "--print", "-r", "--require", "--import", "--input-type"),
        valued("-e", "--eval", "-p", "--print"),
    ),
    "deno": (valued("--eval"), valued("--eval")),
    "perl": (valued("-e", "-E", "-I", "-M", "-m", "-x"), valued("-e", "-E")),
    "ruby": (valued("-e", "-I", "-r", "-C", "-E"), valued("-e")),
    "php": (valued("-r", "-f", "-c", "-d", "-B", "-R", "-F", "-E"), valued("-r", "-B", "-R", "-E")),
    "lua": (valued("-e", "-l"), valued("-e")),
    "Rscript": (valued("-e"), valued("-e")),
    "julia": (valued("-e", "--eval", "-E", "--print"), valued("-e", "--eval", "-E", "--print")),
    "osascript": (valued("-e", "-l"), valued("-e")),
    "pwsh": (valued("-Command", "-c", "-File", "-f"), valued("-Command", "-c")),
    "tclsh": (valued(), valued()),
}
_INTERPRETER_ALIASES: Final = re.compile(
    r"(python|pypy|node|perl|ruby|php|lua)[0-9.]*(?:-[a-z0-9]+)?|nodejs|bun|luajit"
)


def interpreter_name(name: str) -> str | None:
    """`python3.12` is `python`; `None` if `name` is no interpreter tiller knows."""
    if name in _INTERPRETERS:
        return name
    match = _INTERPRETER_ALIASES.fullmatch(name)
    if match is None:
        return None
    if name == "nodejs" or name == "bun":
        return "node"
    if name == "luajit":
        return "lua"
    return match.group(1)


#: Script arguments that mean "the program comes from stdin".
_STDIN: Final = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})


def _dynamic(script: str) -> bool:
    """A script path only known when it runs: `<(curl ...)`, `$F`."""
    return any(mark in script for mark in ("$", "`", "<(", ">("))


def _interpreter(name: str, args: list[str], env: Env) -> Outcome:
    kind = interpreter_name(name) or name
    takes, code_flags = _INTERPRETERS.get(kind, (valued(), valued()))
    opts = options(args, takes, first=True)
    if (
        not opts.positional
        and opts.has("--version", "-V", "--help", "-h", "-v")
        and not opts.has(*code_flags, "-m")
    ):
        return Outcome(READ, f"prints {name}'s version or help")
    module = opts.value("-m") if kind in ("python", "pypy") else None
    if module is not None:
        if module == "pip":
            return pip_risk("pip", opts.positional, env)
        return Outcome(SHELL, f"runs the Python module `{module}`")
    if opts.has(*code_flags):
        code = " ".join(opts.values(*code_flags))
        result = Outcome(SHELL, f"runs {name} code given on the command line", runs_code=True)
        verdict = code_risk(name, code)
        return result.unsure(verdict.risk, verdict.reason)
    script = opts.positional[0] if opts.positional else "-"
    if script in _STDIN:
        return Outcome(SHELL, f"runs a {name} program read from its input", reads_script=True)
    return _script_file(Outcome(SHELL, f"runs the {name} program `{script}`"), script)


#: What interpreter code can do that makes it as dangerous as a shell: delete, run
#: programs, or hide what it runs (decode, evaluate, import by name). A wide net, since
#: it only decides between Ask (code tiller cannot read) and Deny (code that could delete).
_CODE_DELETES: Final = re.compile(
    r"\b(?:rmtree|remove\w*|unlink\w*|rmdir\w*|rm_rf|rm_r|rm_f|rmSync|rm|truncate\w*|shred"
    r"|delete\w*|rename\w*|chmod\w*|chown\w*|system|popen\w*|exec\w*|spawn\w*|fork\w*"
    r"|kill\w*|subprocess|child_process|pty|eval|compile|__import__|import_module|importlib"
    r"|getattr|globals|vars|__builtins__|b64decode|base64|fromhex|unhexlify|decode|codecs"
    r"|chr|ord|FileUtils|qx|Shell|Process|IO\.popen|os\.remove|sh)\b|`|\\x|\\u|\\[0-7]{3}"
)
_CODE_SENDS: Final = re.compile(
    r"\b(?:socket\w*|urllib\w*|requests|httpx|http\w*|urlopen|fetch|net|Net|curl|wget|LWP"
    r"|smtplib|ftplib|telnetlib|open-uri|URI|XMLHttpRequest|WebSocket|dns|tls|ssl)\b"
)


def code_risk(name: str, code: str) -> Verdict:
    """What code given to an interpreter could do, read as text (not run, not parsed):
    always uncertain, as risky as the capabilities it mentions."""
    if _CODE_DELETES.search(code):
        return Verdict(BOOM, f"runs {name} code that could delete files or run any program")
    if _CODE_SENDS.search(code):
        return Verdict(EXT, f"runs {name} code that could send data to another host")
    return Verdict(SHELL, f"runs {name} code, which tiller does not read")


def is_shell(name: str) -> bool:
    """Whether `name` (a path or a name) is a shell that reads a script."""
    return posixpath.basename(name) in _SHELLS


def _shell(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args, valued("-o", "-O", "--rcfile", "--init-file"), first=True)
    if opts.has("-c"):
        script = opts.positional[0] if opts.positional else ""
        return Outcome(
            SHELL, f"runs a {name} script", nested=[Nested(script=script)], runs_code=True
        )
    if opts.has("--version", "--help") and not opts.positional:
        return Outcome(READ, f"prints {name}'s version or help")
    if opts.has("-s") or not opts.positional or opts.positional[0] in _STDIN:
        return Outcome(SHELL, f"runs a {name} script read from its input", reads_script=True)
    script = opts.positional[0]
    return _script_file(Outcome(SHELL, f"runs the script `{script}`"), script)


def _eval(name: str, args: list[str], env: Env) -> Outcome:
    if not args:
        return Outcome(READ, "`eval` of nothing")
    # The classifier checks the script for the outer shell's expansions (`eval "$X"`).
    return Outcome(
        SHELL,
        "evaluates its arguments as a script",
        nested=[Nested(script=" ".join(args))],
        runs_code=True,
    )


def _source(name: str, args: list[str], env: Env) -> Outcome:
    if not args:
        return Outcome(READ, f"`{name}` of nothing")
    if args[0] in _STDIN:
        return Outcome(SHELL, "runs a script read from its input", reads_script=True)
    return _script_file(Outcome(SHELL, f"runs the script `{args[0]}` in this shell"), args[0])


def _script_file(result: Outcome, script: str) -> Outcome:
    """A script run from a path: `bash <(...)`, `source $F` run what is only known
    when they run, which could be anything."""
    if not _dynamic(script):
        return result
    result.runs_code = True
    return result.unsure(
        BOOM, f"runs a script made when it runs (`{script}`), which could be anything"
    )


def _trap(name: str, args: list[str], env: Env) -> Outcome:
    if len(args) < 2 or args[0] in ("-l", "-p", "-", "") or args[0].startswith("-"):
        return Outcome(READ, "lists or resets traps")
    return Outcome(READ, "sets a trap", nested=[Nested(script=args[0])])


def _alias(name: str, args: list[str], env: Env) -> Outcome:
    values = [arg.partition("=")[2] for arg in args if "=" in arg]
    return Outcome(
        READ, "defines aliases", nested=[Nested(script=value) for value in values if value]
    )


def _declare(name: str, args: list[str], env: Env) -> Outcome:
    result = Outcome(READ, "sets shell variables")
    for arg in args:
        if "=" in arg and not arg.startswith("-"):
            result.raise_to(dangerous_assignment(arg))
            stored = command_in_variable(arg)
            if stored is not None:
                verdict = code_risk("a command stored in a variable", stored)
                result.unsure(verdict.risk, verdict.reason)
        elif arg.startswith("-") and not arg.startswith("--") and "n" in arg[1:]:
            # `declare -n r=x`: `$r` is then whatever `x` holds, which tiller does not
            # follow, so a later `$r` in command position could be any program.
            result.unsure(SHELL, f"`{name} -n` makes a variable name another one")
    return result


_SHELLS: Final = ("sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "rbash")

PROGRAM_HANDLERS: Final[dict[str, Handler]] = {
    "kill": _kill,
    **dict.fromkeys(("systemctl", "service"), _systemctl),
    **dict.fromkeys(("crontab", "at", "batch", "atrm", "atq", "tmux", "screen"), _scheduler),
    **dict.fromkeys(("ip", "ifconfig", "hostname", "sysctl", "date", "hwclock"), _net_config),
    **dict.fromkeys(_INTERPRETERS, _interpreter),
    **dict.fromkeys(_SHELLS, _shell),
    "eval": _eval,
    "source": _source,
    ".": _source,
    "trap": _trap,
    "alias": _alias,
    **dict.fromkeys(("export", "declare", "typeset", "local", "readonly"), _declare),
}
