"""Handlers for commands that read, write and remove files (`rm`, `cp`, `mv`, `chmod`,
`dd`, `find`, `sed`, `awk`, `tar`, `tee`, ...), and the plain read-only commands.

What a target risks is decided by `_shell_paths` (the table there); these handlers only
find the targets in each command's arguments.
"""

from __future__ import annotations

import posixpath
import re
from typing import Final

from ._shell_argv import (
    BOOM,
    FILE,
    LOW,
    READ,
    SHELL,
    SYS,
    Env,
    Handler,
    Nested,
    Outcome,
    options,
    valued,
)
from ._shell_paths import Verdict, describe, path_kind, remove_verdict, write_verdict
from ._shell_programs import code_risk

__all__ = ["FILE_HANDLERS", "READ_ONLY_COMMANDS"]

#: Commands that only read (files, the system's state) and print.
READ_ONLY_COMMANDS: Final = frozenset(
    {
        "ls", "ll", "dir", "vdir", "cat", "tac", "nl", "head", "tail", "less", "more", "grep",
        "egrep", "fgrep", "rg", "ag", "ack", "wc", "pwd", "which", "whereis", "type", "whatis",
        "apropos", "echo", "printf", "true", "false", ":", "test", "[", "date", "cal", "whoami",
        "id", "groups", "who", "w", "last", "uname", "arch", "nproc", "lscpu", "lsblk", "lsusb",
        "lspci", "free", "uptime", "df", "du", "stat", "file", "tree", "cut", "tr", "diff",
        "diff3", "sdiff", "cmp", "comm", "basename", "dirname", "realpath", "readlink",
        "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum",
        "cksum", "sum", "base32", "base64", "xxd", "od", "hexdump", "strings", "column", "fold",
        "fmt", "paste", "join", "rev", "seq", "expr", "sleep", "ps", "pgrep", "pidof", "top",
        "htop", "jobs", "wait", "cd", "pushd", "popd", "dirs", "unset", "set", "shopt",
        "unalias", "read", "readarray", "mapfile", "shift", "return", "exit", "hash", "umask",
        "getopts", "let", "break", "continue", "printenv", "locale", "tty", "tput", "clear",
        "man", "help", "info", "jq", "gojq", "zcat", "zgrep", "zless", "bzcat", "xzcat",
        "lsof", "netstat", "ss", "getent", "ldd", "nm", "objdump", "readelf", "size", "yes",
        "factor", "numfmt", "shuf", "tsort", "envsubst", "fd", "fdfind", "locate", "logname",
        "users", "times", "caller", "compgen", "complete", "ulimit", "history", "look",
        "iconv", "bc", "dc", "lsattr", "getfacl", "findmnt", "vmstat", "iostat",
        "mpstat", "dmesg", "journalctl", "hostid", "colordiff", "delta",
        "bat", "batcat", "exa", "eza", "highlight", "pygmentize", "identify",
    }
)  # fmt: skip

_SED_WRITES_OR_RUNS: Final = re.compile(
    r"(?:^|[;\n{}]|/[gIiMmp0-9]*)\s*[0-9$,!/]*\s*[eWw](?:\s|$|;)"
)
_AWK_REACHES_OUT: Final = re.compile(r"system\s*\(|\||>|getline|close\s*\(")
_CHMOD_MODE: Final = re.compile(r"[0-7]{1,4}|[ugoa]*[-+=][rwxXstugo]*(,[ugoa]*[-+=][rwxXstugo]*)*")


_FIND_OPS: Final = frozenset({"(", ")", "!", ","})
_GLOB: Final = frozenset("*?[")
#: Where a recursive `chmod`/`chown` ruins more than a person can repair by hand.
_CHMOD_DANGER: Final = frozenset(
    {"workspace", "outside", "unknown", "home", "system", "root", "device"}
)
#: Programs that delete or wipe what `find -exec` hands them: bulk deletion.
_DELETERS: Final = frozenset({"rm", "unlink", "rmdir", "shred", "truncate", "wipe", "srm"})
#: A deleter inside a script `find -exec sh -c '...'` runs on every file it finds.
_DELETES_IN_SCRIPT: Final = re.compile(
    r"(?:^|[\s;&|(`\"'])(?:rm|unlink|rmdir|shred|truncate|mkfs|dd)\s"
)


def _runs_commands(name: str, program: str) -> Outcome:
    """An awk or sed program that runs shell commands (`system(...)`, sed's `e`): tiller
    does not read them, so it is uncertain, and destructive if they name a deleter."""
    reason = f"its {name} program runs shell commands tiller does not read"
    risk = BOOM if _DELETES_IN_SCRIPT.search(program) else SHELL
    return Outcome(SHELL, reason).unsure(risk, reason)


def _writes(targets: list[str], env: Env, verb: str, base: Outcome) -> Outcome:
    for target in targets:
        base.raise_to(write_verdict(target, env, verb=verb))
    return base


def _shown(paths: list[str]) -> str:
    shown = ", ".join(f"`{p}`" for p in paths[:3])
    return shown + (", ..." if len(paths) > 3 else "") if paths else "nothing"


def _rm(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args)
    recursive = name == "rm" and opts.has("-r", "-R", "--recursive")
    if opts.has("--no-preserve-root"):
        return Outcome(BOOM, "removes files with --no-preserve-root")
    if env.unknown_targets:
        # `find . | xargs rm`: every path the input names, so bulk deletion.
        how = "recursively removes" if recursive else "removes"
        return Outcome(BOOM, f"{how} every path read from its input")
    result = Outcome(FILE, f"removes {_shown(opts.positional)}")
    for target in opts.positional:
        result.raise_to(remove_verdict(target, env, recursive=recursive))
    return result


def _truncate(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args, valued("-s", "--size", "-r", "--reference"))
    result = Outcome(FILE, f"truncates {_shown(opts.positional)}")
    for target in opts.positional:
        if _GLOB & set(target) or env.unknown_targets:
            result.raise_to(Verdict(BOOM, f"truncates every file `{target}` matches", target))
        result.raise_to(remove_verdict(target, env, recursive=False, verb="truncates"))
    return result


def _dd(name: str, args: list[str], env: Env) -> Outcome:
    result = Outcome(READ, "copies its input to its output")
    for arg in args:
        if arg.startswith("of="):
            verdict = write_verdict(arg[3:], env)
            if verdict.risk is not READ:  # `of=/dev/null` discards
                verdict = Verdict(BOOM, f"overwrites `{arg[3:]}` block by block", verdict.written)
            result.raise_to(verdict)
    return result


def _chmod(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args, valued("--reference"))
    recursive = opts.has("-R", "--recursive")
    targets = list(opts.positional)
    if not opts.has("--reference") and targets:
        targets = targets[1:]  # the mode or the owner
    # `chmod -w file`: the mode looked like a flag, so every positional is a target.
    if name == "chmod" and opts.positional and not _CHMOD_MODE.fullmatch(opts.positional[0]):
        targets = list(opts.positional)
    verb = "changes the permissions of" if name == "chmod" else "changes the owner of"
    result = Outcome(FILE, f"{verb} {_shown(targets)}")
    for target in targets:
        kind = path_kind(target, env)
        result.raise_to(Verdict(READ, "", write_verdict(target, env).written))
        if recursive and kind in _CHMOD_DANGER:
            result.raise_to(Verdict(BOOM, f"recursively {verb} `{target}`, {describe(kind)}"))
        elif kind in ("system", "root", "device"):
            result.raise_to(Verdict(SYS, f"{verb} `{target}`, {describe(kind)}"))
    return result


def _copy(name: str, args: list[str], env: Env) -> Outcome:
    takes = valued(
        "-t", "--target-directory", "-S", "--suffix", "-m", "--mode", "-o", "--owner", "-g",
        "--group",
    )  # fmt: skip
    opts = options(args, takes)
    sources = list(opts.positional)
    dests = opts.values("-t", "--target-directory")
    if name == "install" and opts.has("-d", "--directory"):
        dests, sources = sources, []
    elif not dests and len(sources) >= 2:
        dests = [sources.pop()]
    elif not dests and name == "ln":
        dests = ["."]
    verbs = {"cp": "copies to", "mv": "moves to", "install": "installs to", "ln": "links in"}
    result = Outcome(FILE, f"{verbs[name]} {_shown(dests or sources)}")
    _writes(dests, env, verbs[name], result)
    if name == "mv":
        for source in sources:
            result.raise_to(Verdict(READ, "", write_verdict(source, env).written))
            kind = path_kind(source, env)
            if kind in ("root", "home", "system", "device"):
                result.raise_to(Verdict(BOOM, f"moves `{source}` away, {describe(kind)}"))
    return result


def _create(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args, valued("-m", "--mode", "-d", "--date", "-t", "-r", "--reference"))
    if name == "mktemp":
        return Outcome(LOW, "creates a temporary file")
    if name == "mknod":
        return Outcome(SYS, "creates a device node")
    verb = "creates" if name != "touch" else "touches"
    return _writes(opts.positional, env, verb, Outcome(FILE, f"{verb} {_shown(opts.positional)}"))


def _tee(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args, valued("--output-error"))
    if not opts.positional:
        return Outcome(READ, "copies its input to its output")
    return _writes(
        opts.positional, env, "writes", Outcome(FILE, f"writes {_shown(opts.positional)}")
    )


def _sort(name: str, args: list[str], env: Env) -> Outcome:
    takes = valued(
        "-k", "--key", "-t", "--field-separator", "-o", "--output", "-S", "--buffer-size",
        "-T", "--temporary-directory", "--parallel", "--files0-from", "--batch-size",
        "--compress-program",
    )  # fmt: skip
    opts = options(args, takes)
    if opts.has("--compress-program"):
        return Outcome(SHELL, "runs a compression program")
    out = opts.values("-o", "--output")
    return _writes(out, env, "writes", Outcome(READ, "sorts its input"))


def _uniq(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args, valued("-f", "--skip-fields", "-s", "--skip-chars", "-w", "--check-chars"))
    out = opts.positional[1:2]
    return _writes(out, env, "writes", Outcome(READ, "filters repeated lines"))


def _sed(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args, valued("-e", "--expression", "-f", "--file", "-l", "--line-length"))
    scripts = opts.values("-e", "--expression")
    files = list(opts.positional)
    if not scripts and not opts.has("-f", "--file") and files:
        scripts = [files.pop(0)]
    result = Outcome(READ, "edits text as it passes")
    if opts.has("-f", "--file"):
        result.raise_to(Verdict(SHELL, "runs a sed script from a file"))
    if any(_SED_WRITES_OR_RUNS.search(script) for script in scripts):
        result.raise_to(Verdict(SHELL, "its sed script writes files or runs commands (w, e)"))
        result.raise_to(_runs_commands(name, " ".join(scripts)))
    if opts.has("-i", "--in-place"):
        result.raise_to(Verdict(FILE, f"edits {_shown(files)} in place"))
        _writes(files, env, "edits", result)
    return result


def _awk(name: str, args: list[str], env: Env) -> Outcome:
    takes = valued(
        "-f", "--file", "-v", "--assign", "-F", "--field-separator", "-i", "--include", "-e",
        "--source", "-l", "--load",
    )  # fmt: skip
    opts = options(args, takes)
    if opts.has("-f", "--file", "-l", "--load"):
        return Outcome(SHELL, f"runs an {name} program from a file")
    program = opts.value("-e", "--source") or (opts.positional[0] if opts.positional else "")
    if "inplace" in opts.values("-i", "--include"):
        return _writes(opts.positional[1:], env, "edits", Outcome(FILE, "edits files in place"))
    if _AWK_REACHES_OUT.search(program):
        result = Outcome(SHELL, f"its {name} program can run commands or write files")
        return result.raise_to(_runs_commands(name, program))
    return Outcome(READ, "processes text")


def _find(name: str, args: list[str], env: Env) -> Outcome:
    index = 0
    while index < len(args) and (args[index] in ("-H", "-L", "-P") or args[index].startswith("-O")):
        index += 1
    roots: list[str] = []
    while index < len(args) and not (args[index].startswith("-") or args[index] in _FIND_OPS):
        roots.append(args[index])
        index += 1
    roots = roots or ["."]
    expression = args[index:]
    under = Env(env.workspace, env.unknown_targets, tuple(roots), env.cwd)
    result = Outcome(READ, "searches for files")
    position = 0
    while position < len(expression):
        token = expression[position]
        position += 1
        if token in ("-exec", "-execdir", "-ok", "-okdir"):
            end = position
            while end < len(expression) and expression[end] not in (";", "+"):
                end += 1
            if end > position:
                argv = tuple(expression[position:end])
                result.nested.append(Nested(argv=argv, env=under))
                if any(posixpath.basename(word) in _DELETERS for word in argv) or any(
                    _DELETES_IN_SCRIPT.search(word) for word in argv[1:]
                ):
                    result.raise_to(
                        Verdict(
                            BOOM,
                            f"deletes everything it finds under {_shown(roots)} "
                            f"(`{token} {argv[0]}`)",
                        )
                    )
            position = end + 1
        elif token == "-delete":
            # Bulk deletion whatever the filter: `-name '*'` matches everything too.
            kind = path_kind("{}", under)
            result.raise_to(
                Verdict(
                    BOOM, f"deletes everything it finds under {_shown(roots)}, {describe(kind)}"
                )
            )
        elif token in ("-fprint", "-fprint0", "-fls", "-fprintf") and position < len(expression):
            _writes([expression[position]], env, "writes", result)
            position += 2 if token == "-fprintf" else 1
    return result


def _tar(name: str, args: list[str], env: Env) -> Outcome:
    takes = valued("-f", "--file", "-C", "--directory", "-I", "--use-compress-program", "-T", "-X")
    first = args[0] if args else ""
    if first and not first.startswith("-"):  # old style: `tar xzf file`
        args = ["-" + first, *args[1:]]
    opts = options(args, takes)
    if opts.has(
        "-I",
        "--use-compress-program",
        "--to-command",
        "--checkpoint-action",
        "--info-script",
        "-F",
        "--new-volume-script",
    ):
        commands = " ".join(
            opts.values("-I", "--use-compress-program", "--to-command", "--checkpoint-action")
            + opts.values("--info-script", "-F", "--new-volume-script")
        )
        verdict = code_risk(name, commands)
        return Outcome(SHELL, "runs a program while archiving").unsure(verdict.risk, verdict.reason)
    if opts.has("--remove-files"):
        return Outcome(BOOM, "deletes the files it archives (tar --remove-files)")
    if opts.has("-t", "--list") or not opts.has(
        "-x",
        "--extract",
        "--get",
        "-c",
        "--create",
        "-r",
        "--append",
        "-u",
        "--update",
        "--delete",
        "-A",
        "--concatenate",
    ):
        return Outcome(READ, "lists an archive")
    if opts.has("-x", "--extract", "--get"):
        into = opts.values("-C", "--directory") or ["."]
        return _writes(into, env, "extracts into", Outcome(FILE, "extracts an archive"))
    return _writes(opts.values("-f", "--file"), env, "writes", Outcome(FILE, "writes an archive"))


def _archiver(name: str, args: list[str], env: Env) -> Outcome:
    opts = options(args, valued("-d", "-o", "-S", "--suffix", "-x", "-i", "-TT", "--unzip-command"))
    if name == "zip" and any(
        a in ("-TT", "--unzip-command") or a.startswith("--unzip-command=") for a in args
    ):
        command = next(
            (args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-TT", "--unzip-command")), ""
        )
        verdict = code_risk(name, command or " ".join(args))
        return Outcome(SHELL, "runs a command to test the archive (zip -TT)").unsure(
            verdict.risk, verdict.reason
        )
    if (
        opts.has("-c", "--stdout", "--to-stdout", "-l", "--list", "-t", "--test", "-Z")
        and name != "zip"
    ):
        return Outcome(READ, f"reads an archive ({name})")
    if name == "unzip":
        return _writes(
            opts.values("-d") or ["."], env, "extracts into", Outcome(FILE, "extracts an archive")
        )
    return Outcome(FILE, f"compresses or unpacks files in place ({name})")


_ARCHIVERS: Final = (
    "zip", "unzip", "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "unzstd", "7z",
    "unrar", "lz4",
)  # fmt: skip

FILE_HANDLERS: Final[dict[str, Handler]] = {
    "rm": _rm,
    "unlink": _rm,
    "rmdir": _rm,
    "truncate": _truncate,
    "dd": _dd,
    "chmod": _chmod,
    "chown": _chmod,
    "chgrp": _chmod,
    "cp": _copy,
    "mv": _copy,
    "install": _copy,
    "ln": _copy,
    "mkdir": _create,
    "touch": _create,
    "mkfifo": _create,
    "mktemp": _create,
    "mknod": _create,
    "tee": _tee,
    "sort": _sort,
    "uniq": _uniq,
    "sed": _sed,
    "gsed": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "nawk": _awk,
    "find": _find,
    "gfind": _find,
    "tar": _tar,
    "gtar": _tar,
    "bsdtar": _tar,
    **dict.fromkeys(_ARCHIVERS, _archiver),
}
