"""`tiller serve`'s guard rails: no open server without a token."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tiller.cli import app
from tiller.cli._serve import _token


def test_no_auth_is_refused_off_loopback() -> None:
    result = CliRunner().invoke(app, ["serve", "--no-auth", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "loopback" in result.output


def test_no_auth_wins_over_a_token_from_the_environment() -> None:
    assert _token("127.0.0.1", "from-env", True) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_no_auth_is_allowed_on_loopback(host: str) -> None:
    assert _token(host, None, True) is None


def test_without_a_token_one_is_made() -> None:
    made = _token("0.0.0.0", None, False)
    assert made is not None
    assert len(made) >= 24
    assert _token("0.0.0.0", "given", False) == "given"


def test_a_console_script_that_is_not_a_js_file_is_refused_before_serving(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(
        app,
        [
            "serve",
            "--no-auth",
            "--store",
            "memory://",
            "--workspace",
            str(tmp_path),
            "--console-script",
            str(tmp_path / "missing.js"),
        ],
    )
    assert result.exit_code == 2
    assert "is not a JavaScript file" in result.output


def test_serve_mailbox_help_says_every_run_shares_the_one_mailbox() -> None:
    """Review of issue 18: every run served claims from the mailbox NAME, so a message
    goes to whichever run takes its next step first; the help did not say so."""
    import typer

    from tiller.cli import app

    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    (option,) = [p for p in serve.params if "--mailbox" in getattr(p, "opts", ())]
    help_text = " ".join((option.help or "").split())
    assert "every run served here claims from the one mailbox NAME" in help_text
    assert "each message goes to one of them" in help_text
