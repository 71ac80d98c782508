"""`auto` must not destroy the workspace without a person (issue 13, defects 4 and 5):
bulk deletion in any spelling is destructive (denied in every mode, so `--yes` does not
let it through), and a computed program name, an interpreter given code or a
decode-and-execute pipeline is at least asked about."""

from __future__ import annotations

import base64

import pytest

from .conftest import Host, call, tree_digest

# `rm -rf -- *` (rm refuses `.` itself, so the glob is what a real attacker writes).
ENCODED = base64.b64encode(b"rm -rf -- *\n").decode()
DESTRUCTIVE = {
    "find-delete": "find . -mindepth 1 -delete",
    "find-exec-rm": "find . -mindepth 1 -maxdepth 1 -exec rm -rf {} +",
    "computed-rm": "$(echo rm) -rf -- *",
    "backticks-rm": "`echo rm` -rf -- *",
    "base64-sh": f"echo {ENCODED} | base64 -d | sh",
    "python-rmtree": (
        'python3 -c "import os, shutil; [shutil.rmtree(p) if os.path.isdir(p) '
        "else os.remove(p) for p in os.listdir('.')]\""
    ),
    # (The spelling: truncating a glob. Emptying named files is an edit, as
    # `> file` is, which auto allows and `tiller rewind` undoes.)
    "truncate": "truncate -s 0 * src/*",
}


def seed(host: Host) -> dict[str, str]:
    (host.workspace / "src").mkdir()
    (host.workspace / "src" / "app.py").write_text("print('the user work')\n")
    (host.workspace / "notes.txt").write_text("keep me\n")
    return tree_digest(host.workspace)


@pytest.mark.parametrize("command", list(DESTRUCTIVE.values()), ids=list(DESTRUCTIVE))
def test_auto_with_yes_never_destroys_the_workspace(host: Host, command: str) -> None:
    """Denied, not asked: `--yes` answers every question, and the files survive. (Denied
    with --yes implies not run in plain auto either; the test below checks that too for
    the spellings auto used to rate as plain file mutations.)"""
    assert_survives(host, command, "--mode", "auto", "--yes")


@pytest.mark.parametrize("command", [DESTRUCTIVE["find-delete"], DESTRUCTIVE["truncate"]])
def test_auto_never_destroys_the_workspace_without_a_person(host: Host, command: str) -> None:
    assert_survives(host, command, "--mode", "auto")


def assert_survives(host: Host, command: str, *flags: str) -> None:
    before = seed(host)
    done = host.run([call("execute_command", command=command), "Done."], *flags)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    after = {k: v for k, v in tree_digest(host.workspace).items() if not k.startswith(".tiller")}
    assert after == before, f"{command!r} changed the workspace:\n{done.stdout}"
    host.assert_untouched()


# More spellings from the issue, checked with --yes only: a person who said yes to every
# question still never gets them, as destructive is denied in every mode.
MORE_DESTRUCTIVE = {
    "rsync-delete": "mkdir -p /tmp/empty && rsync -a --delete /tmp/empty/ ./",
    "tar-remove-files": "tar --remove-files -cf /tmp/all.tar -- *",
    "chmod-recursive": "chmod -R 000 .",
    "ifs-rm": "IFS=,;rm${IFS}-rf${IFS}--${IFS}*",
    "array-find": 'a=(find . -mindepth 1 -delete); "${a[@]}"',
    "eval-base64": f'eval "$(echo {ENCODED} | base64 -d)"',
    "perl-system": "perl -e 'system(\"rm -rf -- *\")'",
}


@pytest.mark.parametrize("command", list(MORE_DESTRUCTIVE.values()), ids=list(MORE_DESTRUCTIVE))
def test_yes_never_lets_a_bulk_deletion_through(host: Host, command: str) -> None:
    assert_survives(host, command, "--mode", "auto", "--yes")
