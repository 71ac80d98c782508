"""The web console shows a model call being retried (`tiller.model_retry`) in plain words:
"The model did not answer (HTTP 500: …); trying again in 2 s, attempt 2 of 4", the
provider's text shown as text, never markup. Same browser and server as
`test_console_browser.py` (its fixtures are shared)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tiller.loop import Agent
from tiller.model import RetryPolicy, ScriptedModel, TurnError

from . import test_console_browser as shared
from .test_console_browser import by, last_answer, send
from .test_console_people import open_page

browser = shared.browser
workspace = shared.workspace

#: The provider's error text, with markup in it: shown as text.
SERVER_TEXT = "<b>upstream</b> overloaded <img src=x onerror=alert(1)>"


@pytest.fixture
def retry_page(
    browser: Browser,
    serve: Callable[..., str],
    workspace: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Page]:
    model = ScriptedModel([{"error": TurnError(status=500, message=SERVER_TEXT)}, "Fine now."])
    # No jitter: the wait the notice states is the policy's first backoff, 2 s.
    agent = Agent(model, retry=RetryPolicy(max_attempts=4, base_delay=2.0, jitter=0))
    url = serve(agent, token=None, workspace=workspace, store=f"sqlite:///{tmp_path / 'r.db'}")
    yield from open_page(browser, f"{url}/", request.node.name)


def test_a_retried_model_call_is_shown_in_plain_words(retry_page: Page) -> None:
    send(retry_page, "hello")
    expect(last_answer(retry_page)).to_contain_text("Fine now.")
    notice = retry_page.locator('li.notice[data-kind="model-retry"]')
    expect(notice).to_have_count(1)
    expect(notice).to_have_text(
        f"The model did not answer (HTTP 500: {SERVER_TEXT}); trying again in 2 s, attempt 2 of 4."
    )
    # The server's text stayed text: no element was made from it.
    assert notice.locator("b, img").count() == 0
    expect(by(retry_page, "notices")).to_be_visible()
