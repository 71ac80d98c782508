"""The `git` handler (and `gh`): which subcommands read, record, rewrite the working
tree, throw work away, fetch, or push.

- read_only: status, log, diff, show, blame, grep, ls-files, rev-parse, ..., and the
  listing forms of branch, tag, remote, stash, reflog, config;
- low_mutation (recorded, easy to undo): add, commit, stash (push), new branches and tags,
  remote add, reset (soft or mixed), restore --staged;
- file_mutation: checkout and switch (to a branch), merge, rebase, cherry-pick, revert, rm,
  mv, apply, init, stash pop/apply, reset --keep, bisect;
- destructive (all uncommitted work, for good): reset --hard, clean (but -n),
  checkout / restore of `.` (the whole tree), checkout / switch -f with no pathspec,
  stash clear, filter-branch and filter-repo (every commit rewritten, filters run as code);
- shell_mutation: checkout -f / -- paths, restore (of some files), switch
  --discard-changes of paths, stash drop, branch -D, reflog expire, gc --prune, prune,
  config (setting), `-c` on the command line,
  difftool, mergetool, `grep -O`, and subcommands tiller does not know (aliases can run
  anything); the commands given to `rebase --exec`, `bisect run` and `difftool --extcmd`
  are classified as parts of their own;
- network: fetch, pull, clone, ls-remote, remote update, submodule update;
- external_access: push (forced or not), send-email, lfs push.

Throwing some uncommitted work away is a shell mutation: a person may approve it, but
`auto` never lets it through unvetted. Throwing all of it away is bulk deletion.
`git config` writes to the repository's config (and `git -c` of a key that makes git run
a program) count as writing `.git/config`, a protected path the engine denies.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Final

from ._shell_argv import (
    BOOM,
    EXT,
    FILE,
    LOW,
    NET,
    PROC,
    READ,
    SHELL,
    Env,
    Handler,
    Nested,
    Opts,
    Outcome,
    options,
    valued,
)
from ._shell_paths import Verdict

__all__ = ["GIT_HANDLERS"]

_GIT_READ: Final = frozenset(
    {
        "status", "log", "diff", "show", "blame", "annotate", "grep", "ls-files", "ls-tree",
        "rev-parse", "describe", "shortlog", "cat-file", "show-ref", "for-each-ref",
        "merge-base", "rev-list", "name-rev", "count-objects", "check-ignore", "check-attr",
        "whatchanged", "var", "help", "version", "diff-tree", "diff-files", "diff-index",
        "show-branch", "cherry", "range-diff", "verify-commit", "verify-tag", "fsck",
        "check-ref-format", "request-pull", "get-tar-commit-id",
        "merge-tree", "column", "stripspace",
    }
)  # fmt: skip
_GIT_FILE: Final = frozenset(
    {
        "merge", "rebase", "cherry-pick", "revert", "am", "apply", "init", "mv", "rm",
        "sparse-checkout", "format-patch", "archive", "bundle", "repack", "pack-refs",
        "commit-graph", "update-index", "replace", "read-tree", "checkout-index", "worktree",
        "bisect", "maintenance", "gc",
    }
)  # fmt: skip
_GIT_NET: Final = frozenset({"fetch", "pull", "clone", "ls-remote"})
_GIT_VALUED: Final = valued(
    "-m", "--message", "-F", "--file", "-C", "-c", "-b", "-B", "--author", "--date", "-o",
    "--onto", "-s", "--strategy", "-X", "--format", "--pretty", "-n", "--max-count", "-u",
    "--set-upstream-to", "--depth", "--branch", "--origin", "-t", "--track", "-e",
)  # fmt: skip


#: A subcommand's handler: its name, its arguments, and those arguments parsed.
_Sub = Callable[[str, list[str], Opts], Outcome]


def _git_sub(sub: str, rest: list[str], env: Env) -> Outcome:
    opts = options(rest, _GIT_VALUED)
    if sub in _GIT_READ:
        return _reads(sub, opts)
    handler = _SUBCOMMANDS.get(sub)
    if handler is not None:
        return handler(sub, rest, opts)
    return _by_set(sub)


def _by_set(sub: str) -> Outcome:
    """A subcommand with no handler of its own: classified by the set it is in."""
    if sub in _GIT_FILE:
        return Outcome(FILE, f"`git {sub}` changes the working tree or the repository")
    if sub in _GIT_NET:
        return Outcome(NET, f"`git {sub}` downloads from a remote")
    if sub in _GIT_SENDS:
        return Outcome(EXT, f"`git {sub}` sends to another system")
    if sub in ("daemon", "instaweb"):
        return Outcome(PROC, f"`git {sub}` starts a server")
    return Outcome(
        SHELL, f"`git {sub}` is not a git command tiller knows (an alias can run anything)"
    )


def _verb(opts: Opts) -> str:
    return opts.positional[0] if opts.positional else ""


def _reads(sub: str, opts: Opts) -> Outcome:
    if opts.has("--output"):
        return Outcome(FILE, f"`git {sub} --output` writes a file")
    if opts.has("-O", "--open-files-in-pager"):
        return Outcome(SHELL, f"`git {sub} -O` opens the files in a program")
    return Outcome(READ, f"`git {sub}` only reads")


def _records(sub: str, rest: list[str], opts: Opts) -> Outcome:
    return Outcome(LOW, f"`git {sub}` records in the repository")


_BRANCH_LISTING: Final = (
    "--list", "-l", "--contains", "--no-contains", "--merged", "--no-merged", "--points-at",
    "--show-current",
)  # fmt: skip
_BRANCH_CHANGING: Final = (
    "-d", "--delete", "-m", "--move", "-c", "--copy", "-u", "--set-upstream-to",
    "--unset-upstream", "--edit-description",
)  # fmt: skip


def _branch(sub: str, rest: list[str], opts: Opts) -> Outcome:
    if opts.has("-D", "-M", "-C") or (opts.has("-d", "--delete") and opts.has("-f", "--force")):
        return Outcome(SHELL, "deletes or overwrites a branch for good (`git branch -D/-M`)")
    listing = opts.has(*_BRANCH_LISTING)
    if opts.has(*_BRANCH_CHANGING) or (opts.positional and not listing):
        return Outcome(LOW, "creates, renames or deletes a branch")
    return Outcome(READ, "lists branches")


def _tag(sub: str, rest: list[str], opts: Opts) -> Outcome:
    if not opts.positional or opts.has(
        "-l", "--list", "-v", "--verify", "--contains", "--no-contains", "--points-at", "-n"
    ):
        return Outcome(READ, "lists tags")
    return Outcome(LOW, "creates or deletes a tag")


def _remote(sub: str, rest: list[str], opts: Opts) -> Outcome:
    verb = _verb(opts)
    if verb in ("", "show", "get-url"):
        return Outcome(READ, "lists remotes")
    if verb in ("update", "prune"):
        return Outcome(NET, "fetches from remotes")
    return Outcome(LOW, "changes the remotes")


_CONFIG_SETTING: Final = (
    "--unset", "--unset-all", "--add", "--replace-all", "--rename-section",
    "--remove-section", "--edit", "-e",
)  # fmt: skip
_CONFIG_GETTING: Final = (
    "--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l", "--get-color",
    "--get-colorbool",
)  # fmt: skip


def _config(sub: str, rest: list[str], opts: Opts) -> Outcome:
    setting = opts.has(*_CONFIG_SETTING)
    getting = opts.has(*_CONFIG_GETTING)
    if not setting and (_verb(opts) in ("get", "list") or getting or len(opts.positional) <= 1):
        return Outcome(READ, "reads git configuration")
    result = Outcome(SHELL, "changes git configuration, which can make git run programs")
    if opts.has("--global", "--system"):
        return result
    target = opts.value("-f", "--file") or ".git/config"
    return result.raise_to(Verdict(SHELL, result.reason, target))


def _stash(sub: str, rest: list[str], opts: Opts) -> Outcome:
    verb = _verb(opts) or "push"
    if verb in ("list", "show"):
        return Outcome(READ, "lists stashes")
    if verb == "clear":
        return Outcome(BOOM, "discards every stash for good (`git stash clear`)")
    if verb == "drop":
        return Outcome(SHELL, "discards stashed work for good")
    if verb in ("pop", "apply", "branch"):
        return Outcome(FILE, "applies stashed changes to the working tree")
    return Outcome(LOW, "stashes changes")


def _reflog(sub: str, rest: list[str], opts: Opts) -> Outcome:
    if _verb(opts) in ("expire", "delete"):
        return Outcome(SHELL, "deletes reflog entries, the way back to lost commits")
    return Outcome(READ, "shows the reflog")


def _submodule(sub: str, rest: list[str], opts: Opts) -> Outcome:
    verb = _verb(opts)
    if verb == "foreach":
        script = " ".join(w for w in opts.positional[1:])
        return Outcome(SHELL, "runs a command in every submodule", nested=[Nested(script=script)])
    if verb in ("", "status", "summary"):
        return Outcome(READ, "lists submodules")
    return Outcome(NET, "fetches or changes submodules")


def _reset(sub: str, rest: list[str], opts: Opts) -> Outcome:
    if opts.has("--hard"):
        return Outcome(BOOM, "discards all uncommitted work for good (`git reset --hard`)")
    if opts.has("--keep", "--merge"):
        return Outcome(FILE, "moves the branch and updates the working tree")
    return Outcome(LOW, "moves the branch or unstages changes")


def _clean(sub: str, rest: list[str], opts: Opts) -> Outcome:
    if opts.has("-n", "--dry-run"):
        return Outcome(READ, "lists untracked files it would delete")
    return Outcome(BOOM, "deletes untracked files in bulk, for good (`git clean`)")


def _checkout(sub: str, rest: list[str], opts: Opts) -> Outcome:
    """`checkout` and `switch`."""
    discards = opts.has("-f", "--force", "--discard-changes", "-p", "--patch", "--ours", "--theirs")
    if _everything(opts.positional):
        return Outcome(BOOM, f"discards all uncommitted changes for good (`git {sub} .`)")
    if opts.has("-f", "--force", "--discard-changes") and "--" not in rest:
        # No pathspec: the whole working tree, like `git reset --hard`.
        return Outcome(BOOM, f"discards all uncommitted changes for good (`git {sub} -f`)")
    if discards or "--" in rest:
        return Outcome(SHELL, f"discards uncommitted changes (`git {sub}`)")
    return Outcome(FILE, f"switches the working tree (`git {sub}`)")


def _restore(sub: str, rest: list[str], opts: Opts) -> Outcome:
    if opts.has("--staged", "-S") and not opts.has("--worktree", "-W"):
        return Outcome(LOW, "unstages changes")
    if _everything(opts.positional):
        return Outcome(BOOM, "discards all uncommitted changes for good (`git restore .`)")
    return Outcome(SHELL, "discards uncommitted changes to files for good (`git restore`)")


def _filter(sub: str, rest: list[str], opts: Opts) -> Outcome:
    # Rewrites every commit, running the filters it is given as shell code.
    return Outcome(BOOM, f"rewrites all history and runs its filters (`git {sub}`)")


def _prunes(sub: str, rest: list[str], opts: Opts) -> Outcome:
    """`prune`, and `gc` (which prunes when asked to)."""
    if sub == "prune" or any(a.startswith("--prune") for a in rest):
        return Outcome(SHELL, f"rewrites or prunes history for good (`git {sub}`)")
    return _by_set(sub)


def _update_ref(sub: str, rest: list[str], opts: Opts) -> Outcome:
    return Outcome(SHELL if opts.has("-d") else FILE, "changes a ref directly")


def _rm(sub: str, rest: list[str], opts: Opts) -> Outcome:
    if _everything(opts.positional):
        return Outcome(BOOM, "deletes every tracked file (`git rm -r .`)")
    return _by_set(sub)


def _push(sub: str, rest: list[str], opts: Opts) -> Outcome:
    forced = opts.has("-f", "--force", "--force-with-lease", "--mirror", "--delete", "-d") or any(
        w.startswith("+") for w in opts.positional
    )
    return Outcome(
        EXT, "pushes to a remote" + (", rewriting or deleting what is there" if forced else "")
    )


def _lfs(sub: str, rest: list[str], opts: Opts) -> Outcome:
    verb = _verb(opts)
    return Outcome(EXT if verb == "push" else NET, f"`git lfs {verb}` talks to the LFS server")


def _runs(sub: str, rest: list[str], opts: Opts) -> Outcome:
    return _runs_commands(sub, rest)


_GIT_SENDS: Final = frozenset({"send-email", "imap-send", "svn", "p4", "cvsexportcommit"})
#: The subcommands with a handler of their own (checked after `_GIT_READ`, before the sets).
_SUBCOMMANDS: Final[dict[str, _Sub]] = {
    "rebase": _runs,
    "bisect": _runs,
    "difftool": _runs,
    "mergetool": _runs,
    "add": _records,
    "commit": _records,
    "notes": _records,
    "branch": _branch,
    "tag": _tag,
    "remote": _remote,
    "config": _config,
    "stash": _stash,
    "reflog": _reflog,
    "submodule": _submodule,
    "reset": _reset,
    "clean": _clean,
    "checkout": _checkout,
    "switch": _checkout,
    "restore": _restore,
    "filter-branch": _filter,
    "filter-repo": _filter,
    "prune": _prunes,
    "gc": _prunes,
    "update-ref": _update_ref,
    "rm": _rm,
    "push": _push,
    "lfs": _lfs,
}


def _everything(paths: list[str]) -> bool:
    """Whether the pathspecs cover the whole tree (`.`, `*`, `:/`, `./`)."""
    return any(posixpath.normpath(p) == "." or p in ("*", ":/", ":", "/") for p in paths)


#: Configuration keys whose value git runs as a program (or that point git at hooks).
_RUNS_PROGRAMS: Final = (
    "core.fsmonitor", "core.hookspath", "core.sshcommand", "core.pager", "core.editor",
    "core.askpass", "core.gitproxy", "sequence.editor", "diff.external", "gpg.program",
    "credential.helper", "alias.", "filter.", "diff.", "merge.", "pager.", "uploadpack.",
    "receivepack.", "protocol.", "http.", "remote.", "include.", "includeif.", "safe.",
)  # fmt: skip


def _runs_commands(sub: str, rest: list[str]) -> Outcome:
    """Subcommands that can run a command given to them: `rebase --exec`, `bisect run`,
    `difftool --extcmd`, and the merge and diff tools."""
    opts = options(rest, valued("-x", "--exec", "--extcmd", "-t", "--tool", "-s", "--strategy"))
    scripts = opts.values("-x", "--exec", "--extcmd")
    nested = [Nested(script=script) for script in scripts]
    if sub == "bisect" and rest[:1] == ["run"]:
        nested.append(Nested(argv=tuple(rest[1:])))
    if nested:
        return Outcome(SHELL, f"`git {sub}` runs the commands given to it", nested=nested)
    if sub in ("difftool", "mergetool"):
        return Outcome(SHELL, f"`git {sub}` runs an external tool")
    return Outcome(FILE, f"`git {sub}` changes the working tree")


def _git(name: str, args: list[str], env: Env) -> Outcome:
    floor: Outcome | None = None
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix"):
            index += 2
            continue
        if arg in ("-c", "--config-env") or arg.startswith(("--exec-path", "--config-env=")):
            floor = Outcome(
                SHELL, "sets git configuration for the call, which can make git run programs"
            )
            key = (args[index + 1] if index + 1 < len(args) else "").partition("=")[0].lower()
            if arg != "-c" or key.startswith(_RUNS_PROGRAMS) or not key:
                # Overriding what `.git/config` makes git run is changing it, for this call.
                floor.raise_to(Verdict(SHELL, floor.reason, ".git/config"))
            index += 2 if arg in ("-c", "--config-env") else 1
            continue
        if arg in ("--version", "--help", "-h", "--html-path", "--man-path", "--info-path"):
            return Outcome(READ, "prints git's version or help")
        if not arg.startswith("-"):
            break
        index += 1
    if index >= len(args):
        return Outcome(READ, "git with no subcommand prints its help")
    return _git_sub(args[index], args[index + 1 :], env).raise_to(floor)


def _gh(name: str, args: list[str], env: Env) -> Outcome:
    takes = valued(
        "-R", "--repo", "-X", "--method", "-f", "-F", "--field", "--raw-field", "-H", "--header",
        "--input", "-q", "--jq", "-t", "--template", "-b", "--body", "--title", "-L", "--limit",
        "-s", "--state", "-a", "--assignee", "-l", "--label", "-B", "--base", "--json",
    )  # fmt: skip
    opts = options(args, takes)
    words = opts.positional
    if not words or words[0] in ("version", "help") or opts.has("--version", "--help"):
        return Outcome(READ, "prints gh's version or help")
    if words[0] == "api":
        method = (opts.value("-X", "--method") or "GET").upper()
        if method not in ("GET", "HEAD") or opts.has(
            "-f", "-F", "--field", "--raw-field", "--input"
        ):
            return Outcome(EXT, "sends a request to the GitHub API")
        return Outcome(NET, "reads from the GitHub API")
    reading = (
        "list",
        "view",
        "status",
        "diff",
        "checks",
        "search",
        "ls",
        "download",
        "watch",
        "clone",
    )
    if words[0] in ("search", "status") or (len(words) > 1 and words[1] in reading):
        return Outcome(NET, f"reads from GitHub (`gh {' '.join(words[:2])}`)")
    if words[0] == "auth" and words[1:2] == ["status"]:
        return Outcome(NET, "checks the GitHub login")
    return Outcome(EXT, f"acts on GitHub (`gh {' '.join(words[:2])}`)")


GIT_HANDLERS: Final[dict[str, Handler]] = {"git": _git, "gh": _gh, "hub": _gh}
