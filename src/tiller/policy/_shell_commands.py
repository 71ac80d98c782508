"""What tiller knows about individual commands: the risk of one argv.

`classify_argv(argv, env)` strips wrappers (`sudo`, `env`, `nice`, `timeout`, `xargs`,
`exec`, `nohup`, `time`, `command`, `builtin`, `stdbuf`, `setsid`, `watch`, `su`, ...) to
reach the command that really runs, keeping the floor a wrapper adds (root: at least
system_install; detaching: at least process), then asks the command's handler. Scripts a
command runs on its own (`sh -c '...'`, `eval`, `watch`, `trap`, `find -exec`) come back
as `Nested` items for the classifier to classify in turn.

The choices, command family by command family:

- **read only**: `ls`, `cat`, `grep`, `rg`, `head`, `wc`, `echo`, `pwd`, `which`, `find`
  without actions, `sed` without `-i` (or a `w`/`e` command), `awk` without `system`,
  pipes or redirection in its program, `git status/log/diff/show/...`, package listings.
- **low mutation**: bookkeeping that is easy to undo: `git add`, `git commit`, `git stash`,
  new tags and branches, `mktemp`.
- **file mutation**: `rm` (not recursive, or recursive inside the workspace), `mv`, `cp`,
  `mkdir`, `touch`, `sed -i`, archives, `git checkout/merge/rebase`, a `>` redirection;
  see `_shell_paths` for what each target risks.
- **shell mutation**: running programs whose effect tiller cannot see: interpreters
  (`python -c`, `node -e`), test runners and build tools (`pytest`, `make`, `npm test`,
  `cargo build`), shells running scripts, and every command tiller does not know. Git
  operations that throw away some uncommitted work (`checkout -- file`, `restore file`,
  `stash drop`, `branch -D`) are here too: a person may approve them, but `auto` never
  lets them through unvetted.
- **network**: reading from the network: `curl`/`wget` GETs, `git fetch/pull/clone`,
  `ping`, `dig`, project-local installs (`npm install`, `uv add`, `go get`).
- **process**: `kill`, `pkill`, `killall`, `systemctl start/stop`, `nohup`, `setsid`,
  `crontab`, containers, and anything sent to the background with `&`.
- **external access**: sending to other machines: `git push` (forced or not), `curl -d`,
  `-F`, `-T`, `-X POST`, `wget --post-data`, `ssh`, `scp`/`rsync` to a remote, `nc`,
  `npm publish`, cloud CLIs (`aws`, `gcloud`, `kubectl apply`, `terraform apply`), mail.
- **system install**: changes to the machine itself: `apt`/`brew`/`dnf`/... installs,
  `pip install` (always, even in a virtualenv: tiller cannot tell), `npm install -g`,
  `cargo install`, `go install`, `make install`, writes to system paths, `sudo`/`su`
  anything, users, mounts, kernel modules, reboots, and code piped from the network into
  a shell (`curl ... | sh`).
- **destructive**: irreversible damage no approval should wave through: recursive
  removal of `/`, `~`, `*`, `.`, `..` or anything outside the workspace, removal of
  system files, and bulk deletion in any spelling (`rm *`, `find -delete`, `find -exec
  rm`, `xargs rm`, `rsync --delete`, `tar --remove-files`, `truncate` of a glob,
  `git clean -f`, `git reset --hard`, `git checkout -- .`, `git restore .`), `shred`,
  `mkfs`, `dd of=...`, writes to block devices, `chmod -R`/`chown -R` on the whole
  workspace, system paths or outside it, `kill -9 -1`, and fork bombs (decided by the
  classifier, which sees function bodies).

**Uncertain** (`CommandRisk.uncertain`): what tiller cannot read is rated the highest
risk it could be. A program name computed when the command runs (`$(echo rm) -rf /`,
`"${a[@]}"`, `rm${IFS}-rf`, `$CMD`) or code read from `xargs`' input could be anything,
so it is destructive; code given to an interpreter (`python -c`, `perl -e`, `node -e`)
is as risky as what its text mentions (`_shell_programs.code_risk`); the engine never
allows an uncertain command without a person.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Final

from ._risk import RiskClass
from ._shell_argv import (
    BOOM,
    EXT,
    NET,
    PROC,
    READ,
    SHELL,
    SYS,
    Env,
    Nested,
    Outcome,
    dangerous_assignment,
    options,
    valued,
)
from ._shell_files import FILE_HANDLERS, READ_ONLY_COMMANDS
from ._shell_git import GIT_HANDLERS
from ._shell_network import NETWORK_HANDLERS
from ._shell_packages import PACKAGE_HANDLERS
from ._shell_paths import Verdict, chdir
from ._shell_programs import PROGRAM_HANDLERS, interpreter_name

__all__ = ["CommandRisk", "classify_argv"]


@dataclass(frozen=True, slots=True)
class CommandRisk:
    """The risk of one argv. `command` is what runs once wrappers are stripped;
    `nested` what it runs by itself; `runs_code` says its arguments are code (so a
    network substitution in them means code from the network); `reads_script` that it
    reads its program from stdin."""

    risk: RiskClass
    reason: str
    command: tuple[str, ...]
    nested: tuple[Nested, ...] = ()
    runs_code: bool = False
    reads_script: bool = False
    uncertain: str | None = None
    writes: tuple[str, ...] = ()


# ── wrappers ─────────────────────────────────────────────────────────────────────


@dataclass(slots=True)
class _Unwrapped:
    rest: list[str]
    floor: Verdict | None = None
    env: Env | None = None
    script: str | None = None  # the rest is a shell script (`watch`, `su -c`)
    done: Outcome | None = None  # nothing is wrapped: this is the answer


def _wrap_sudo(name: str, args: list[str], env: Env) -> _Unwrapped:
    takes = valued("-u", "-g", "-p", "-C", "-D", "-h", "-r", "-t", "-U", "-T", "--user",
                     "--group", "--prompt", "--chdir", "--host", "--role", "--type",
                     "--other-user", "--close-from", "--command-timeout")  # fmt: skip
    opts = options(args, takes, first=True)
    if opts.positional:
        return _Unwrapped(opts.positional, Verdict(SYS, f"runs as root ({name})"))
    if opts.has("-l", "--list", "-v", "--validate", "-k", "-K", "--reset-timestamp"):
        return _Unwrapped([], done=Outcome(READ, f"`{name}` checks its own permissions"))
    return _Unwrapped([], done=Outcome(SYS, f"opens a root shell ({name})"))


def _wrap_su(name: str, args: list[str], env: Env) -> _Unwrapped:
    opts = options(args, valued("-c", "--command", "-s", "--shell", "-g", "-G", "-w"))
    script = opts.value("-c", "--command")
    floor = Verdict(SYS, "runs as another user (su)")
    if script is None:
        return _Unwrapped([], done=Outcome(SYS, "opens a shell as another user (su)"))
    return _Unwrapped([], floor, script=script)


def _wrap_env(name: str, args: list[str], env: Env) -> _Unwrapped:
    floor: Verdict | None = None
    moved = env
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            index += 1
            break
        if arg in ("-S", "--split-string") or arg.startswith(("-S", "--split-string=")):
            # `env -S 'cmd args'` splits its argument into the command line.
            if arg in ("-S", "--split-string"):
                text = args[index + 1] if index + 1 < len(args) else ""
                index += 1
            else:
                text = arg.partition("=")[2] if arg.startswith("--") else arg[2:]
            script = " ".join([text, *args[index + 1 :]])
            return _Unwrapped([], floor, env=moved, script=script)
        if arg in ("-C", "--chdir") or arg.startswith("--chdir="):
            target = arg.partition("=")[2] or (args[index + 1] if index + 1 < len(args) else "")
            moved = replace(moved, cwd=chdir(moved.cwd, target))
            index += 1 if "=" in arg else 2
            continue
        if arg in ("-u", "--unset"):
            index += 2
            continue
        if arg.startswith("-") and arg != "-":
            index += 1
            continue
        if "=" in arg and not arg.startswith("="):
            floor = dangerous_assignment(arg) or floor
            index += 1
            continue
        break
    rest = args[index:]
    if not rest:
        return _Unwrapped([], done=Outcome(READ, "prints the environment"))
    return _Unwrapped(rest, floor, env=moved)


def _skip_then_command(
    takes: frozenset[str], *, positional_before: int = 0
) -> Callable[[str, list[str], Env], _Unwrapped]:
    """A wrapper whose options (`takes` take a value) and `positional_before` fixed
    arguments (a duration, a CPU mask) come before the command."""

    def unwrap(name: str, args: list[str], env: Env) -> _Unwrapped:
        opts = options(args, takes, first=True)
        rest = opts.positional[positional_before:]
        if not rest:
            return _Unwrapped([], done=Outcome(READ, f"`{name}` with no command to run"))
        return _Unwrapped(rest)

    return unwrap


def _wrap_detached(name: str, args: list[str], env: Env) -> _Unwrapped:
    opts = options(args, valued(), first=True)
    floor = Verdict(PROC, f"keeps running after the command ends ({name})")
    if not opts.positional:
        return _Unwrapped([], done=Outcome(PROC, f"`{name}` with no command"))
    return _Unwrapped(opts.positional, floor)


def _wrap_xargs(name: str, args: list[str], env: Env) -> _Unwrapped:
    takes = valued("-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter",
                     "--eof", "--replace", "--max-lines", "--max-args", "--max-procs",
                     "--max-chars", "--process-slot-var")  # fmt: skip
    opts = options(args, takes, first=True)
    rest = opts.positional or ["echo"]
    return _Unwrapped(rest, env=Env(env.workspace, True, env.found_under, env.cwd))


def _wrap_command(name: str, args: list[str], env: Env) -> _Unwrapped:
    opts = options(args, valued(), first=True)
    if opts.has("-v", "-V"):
        return _Unwrapped([], done=Outcome(READ, "looks a command up"))
    if not opts.positional:
        return _Unwrapped([], done=Outcome(READ, f"`{name}` with no command"))
    return _Unwrapped(opts.positional)


def _wrap_exec(name: str, args: list[str], env: Env) -> _Unwrapped:
    opts = options(args, valued("-a"), first=True)
    if not opts.positional:
        return _Unwrapped([], done=Outcome(READ, "`exec` with only redirections"))
    return _Unwrapped(opts.positional)


def _wrap_watch(name: str, args: list[str], env: Env) -> _Unwrapped:
    opts = options(args, valued("-n", "--interval", "-q", "--equexit"), first=True)
    if not opts.positional:
        return _Unwrapped([], done=Outcome(READ, "`watch` with no command"))
    if opts.has("-x", "--exec"):
        return _Unwrapped(opts.positional)
    return _Unwrapped([], script=" ".join(opts.positional))


def _wrap_coproc(name: str, args: list[str], env: Env) -> _Unwrapped:
    """`coproc [NAME] { LIST; }`: tree-sitter-bash reads the group as words of a
    `coproc` command, so the words after the `{` or `(` are the script it runs."""
    for index, word in enumerate(args[:2]):
        if word in ("{", "("):
            floor = Verdict(PROC, "keeps running after the command ends (coproc)")
            return _Unwrapped([], floor, script=" ".join(args[index + 1 :]))
    return _wrap_detached(name, args, env)


def _wrap_parallel(name: str, args: list[str], env: Env) -> _Unwrapped:
    """GNU `parallel CMD ::: ARGS` runs CMD once per argument (like `xargs`); with no
    command it runs each input line as a shell command, which tiller cannot read."""
    takes = valued("-j", "--jobs", "-S", "--sshlogin", "-a", "--arg-file", "-d",
                     "--delimiter", "-E", "-I", "--replace", "-n", "--max-args",
                     "--joblog", "--results", "--tmpdir", "--workdir", "--timeout")  # fmt: skip
    head = args
    for marker in (":::", "::::", ":::+", "::::+"):
        if marker in head:
            head = head[: head.index(marker)]
    opts = options(head, takes, first=True)
    if not opts.positional:
        return _Unwrapped([], done=Outcome(BOOM, f"`{name}` runs its input as commands"))
    return _Unwrapped(opts.positional, env=Env(env.workspace, True, env.found_under, env.cwd))


def _wrap_flock(name: str, args: list[str], env: Env) -> _Unwrapped:
    """`flock [opts] LOCK CMD...` or `flock [opts] LOCK -c SCRIPT`."""
    opts = options(args, valued("-w", "--timeout", "-E", "--conflict-exit-code", "-c",
                                "--command"))  # fmt: skip
    script = opts.value("-c", "--command")
    if script is not None:
        return _Unwrapped([], script=script)
    rest = opts.positional[1:]
    if not rest:
        return _Unwrapped([], done=Outcome(READ, f"`{name}` with no command to run"))
    return _Unwrapped(rest)


def _wrap_script(name: str, args: list[str], env: Env) -> _Unwrapped:
    """`script -c SCRIPT [FILE]` runs SCRIPT in a shell; without it, an interactive one."""
    opts = options(args, valued("-c", "--command", "-E", "--echo", "-I", "-O", "-T", "-B",
                                "--log-in", "--log-out", "--log-timing", "--log-io"))  # fmt: skip
    script = opts.value("-c", "--command")
    if script is None:
        return _Unwrapped([], done=Outcome(SHELL, f"`{name}` opens a shell"))
    return _Unwrapped([], script=script)


_WRAPPERS: Final[dict[str, Callable[[str, list[str], Env], _Unwrapped]]] = {
    "sudo": _wrap_sudo,
    "doas": _wrap_sudo,
    "su": _wrap_su,
    "env": _wrap_env,
    "nice": _skip_then_command(valued("-n", "--adjustment")),
    "ionice": _skip_then_command(valued("-c", "-n", "-p", "--class", "--classdata")),
    "timeout": _skip_then_command(
        valued("-s", "-k", "--signal", "--kill-after"), positional_before=1
    ),
    "stdbuf": _skip_then_command(valued("-i", "-o", "-e", "--input", "--output", "--error")),
    "taskset": _skip_then_command(valued(), positional_before=1),
    "chrt": _skip_then_command(valued(), positional_before=1),
    "unbuffer": _skip_then_command(valued()),
    "time": _skip_then_command(valued("-f", "--format", "-o", "--output")),
    "builtin": _wrap_command,
    "command": _wrap_command,
    "exec": _wrap_exec,
    "xargs": _wrap_xargs,
    "nohup": _wrap_detached,
    "setsid": _wrap_detached,
    "disown": _wrap_detached,
    "watch": _wrap_watch,
    "pkexec": _wrap_sudo,
    "busybox": _skip_then_command(valued()),
    "toybox": _skip_then_command(valued()),
    "coproc": _wrap_coproc,
    "parallel": _wrap_parallel,
    "flock": _wrap_flock,
    "chronic": _skip_then_command(valued()),
    "runuser": _wrap_sudo,
    "script": _wrap_script,
}

_SYSTEM_BIN_DIRS: Final = frozenset(
    {
        "/bin",
        "/usr/bin",
        "/usr/local/bin",
        "/sbin",
        "/usr/sbin",
        "/usr/local/sbin",
        "/opt/homebrew/bin",
    }
)


def _each(risk: RiskClass, reason: str, names: str) -> dict[str, Verdict]:
    return {name: Verdict(risk, f"{reason} ({name})") for name in names.split()}


#: Commands whose risk does not depend on their arguments.
_FIXED: Final[dict[str, Verdict]] = {
    **_each(BOOM, "formats or wipes a disk", """
        mkfs mke2fs mkswap wipefs fdisk sfdisk cfdisk gdisk sgdisk parted blkdiscard mkdosfs
        newfs diskutil format"""),
    **_each(BOOM, "overwrites files beyond recovery", "shred wipe srm"),
    **_each(BOOM, "signals every process", "killall5"),
    **_each(EXT, "connects to another machine", """
        ssh mosh sftp ftp lftp telnet nc netcat ncat socat rclone s3cmd gsutil azcopy"""),
    **_each(EXT, "sends mail", "mail mailx sendmail mutt msmtp swaks"),
    **_each(EXT, "acts on cloud infrastructure or a registry", """
        aws gcloud az doctl heroku fly flyctl vercel netlify firebase wrangler ansible
        ansible-playbook twine"""),
    **_each(NET, "reaches the network", """
        ping ping6 dig nslookup host traceroute tracepath whois mtr aria2c npx pnpx bunx
        git-lfs"""),
    **_each(PROC, "signals or reprioritises processes", "pkill killall renice xkill launchctl"),
    **_each(SYS, "changes the machine itself", """
        mount umount swapon swapoff modprobe insmod rmmod depmod useradd userdel usermod adduser
        deluser groupadd groupdel groupmod passwd chpasswd chsh chfn visudo vipw
        update-alternatives ldconfig update-grub grub-install locale-gen update-locale
        update-initramfs dracut chroot iptables ip6tables nft ufw firewall-cmd setenforce
        hostnamectl timedatectl localectl chattr setcap efibootmgr nmcli cryptsetup lvm lvcreate
        lvremove vgcreate pvcreate zpool zfs btrfs losetup reboot shutdown poweroff halt init
        telinit softwareupdate dpkg-reconfigure snapctl"""),
    **_each(SHELL, "runs tests, builds or tools, which can run anything", """
        pytest py.test tox nox mypy ruff black isort flake8 pylint jest vitest mocha tsc eslint
        prettier mvn gradle gradlew ant sbt dotnet swift rustc gcc g++ cc clang clang++ javac
        java pre-commit hatch pdm rake just task"""),
}  # fmt: skip

_HANDLERS: Final = {
    **FILE_HANDLERS,
    **GIT_HANDLERS,
    **NETWORK_HANDLERS,
    **PACKAGE_HANDLERS,
    **PROGRAM_HANDLERS,
}
_KNOWN_NAMES: Final = tuple(sorted({*_HANDLERS, *_FIXED, *READ_ONLY_COMMANDS, *_WRAPPERS}))


_GLOB: Final = frozenset("*?[")


def _is_dynamic(word: str) -> bool:
    return "$" in word or "`" in word or "<(" in word or ">(" in word


def _elsewhere(word: str) -> bool:
    """A command named by a path outside the system's bin directories (`./ls`): its
    name says nothing about what it does."""
    return "/" in word and posixpath.dirname(posixpath.normpath(word)) not in _SYSTEM_BIN_DIRS


def _lookup(word: str) -> str:
    name = posixpath.basename(word) if "/" in word else word
    interpreter = interpreter_name(name)
    if interpreter is not None and interpreter not in _HANDLERS:
        return "python" if interpreter == "pypy" else interpreter
    if name.startswith("pip") and name[3:].replace(".", "").isdigit():
        return "pip"
    if name.startswith("mkfs."):
        return "mkfs"
    return interpreter or name


def _by_pattern(pattern: str, args: list[str], env: Env) -> Outcome:
    """`/bin/r? -rf /`: the shell picks the command by a glob, so it is as risky as the
    riskiest command tiller knows that the glob matches."""
    result = Outcome(SHELL, f"runs a command picked by the pattern `{pattern}`")
    for name in _KNOWN_NAMES:
        if fnmatchcase(name, pattern):
            result.raise_to(_named(name, args, env))
    return result


def _command(args: list[str], env: Env) -> Outcome:
    word = args[0]
    if _is_dynamic(word):
        # `$(echo rm) -rf /`, `${IFS}` tricks, `"${a[@]}"`: the program is computed when
        # the command runs, so it could be `rm -rf /`.
        return Outcome(SHELL, "", runs_code=True).unsure(
            BOOM,
            f"runs a program whose name is computed when it runs (`{word}`): "
            "it could be anything, `rm -rf /` included",
        )
    if _GLOB & set(posixpath.basename(word)):
        return _by_pattern(posixpath.basename(word), args[1:], env)
    return _named(word, args[1:], env)


def _named(word: str, args: list[str], env: Env) -> Outcome:
    """The risk of the command `word` (a name or a path to it) with `args`."""
    name = _lookup(word)
    handler = _HANDLERS.get(name)
    known = handler is not None or name in _FIXED or name in READ_ONLY_COMMANDS
    if handler is not None:
        result = handler(name, args, env)
    elif name in _FIXED:
        fixed = _FIXED[name]
        result = Outcome(fixed.risk, fixed.reason)
    elif name in READ_ONLY_COMMANDS:
        result = Outcome(READ, "only reads")
    else:
        result = Outcome(
            SHELL, f"`{name}` is not a command tiller knows, so it may change anything"
        )
    if known and args in (["--version"], ["--help"]) and result.risk is not BOOM:
        result = Outcome(READ, f"prints {name}'s version or help")
    if _elsewhere(word):
        result.raise_to(Verdict(SHELL, f"runs the program `{word}`, whatever it is"))
    return result


def classify_argv(argv: Sequence[str], env: Env | None = None) -> CommandRisk:
    """The risk of running `argv` (words with quotes removed; expansions left as
    written) in `env`, wrappers stripped."""
    env = env or Env()
    args = list(argv)
    floor: Verdict | None = None
    result: Outcome | None = None
    while args and result is None:
        word = args[0]
        wrapper = None if _is_dynamic(word) or _elsewhere(word) else _WRAPPERS.get(_lookup(word))
        if wrapper is None:
            break
        unwrapped = wrapper(_lookup(word), args[1:], env)
        if unwrapped.floor is not None and (
            floor is None or unwrapped.floor.risk.rank > floor.risk.rank
        ):
            floor = unwrapped.floor
        env = unwrapped.env or env
        if unwrapped.done is not None:
            result = unwrapped.done
        elif unwrapped.script is not None:
            result = Outcome(
                SHELL,
                "runs a shell script",
                nested=[Nested(script=unwrapped.script)],
                runs_code=True,
            )
        args = unwrapped.rest
    if result is None:
        result = _command(args, env) if args else Outcome(READ, "runs nothing")
    if env.unknown_targets and (result.runs_code or result.reads_script):
        # `xargs sh`, `xargs -I{} sh -c {}`: the code comes from the input.
        result.unsure(BOOM, f"runs code read from its input (`{' '.join(args[:2])}`)")
    result.raise_to(floor)
    return CommandRisk(
        result.risk,
        result.reason,
        tuple(args) if args else tuple(argv),
        tuple(result.nested),
        result.runs_code,
        result.reads_script,
        result.uncertain,
        tuple(result.writes),
    )
