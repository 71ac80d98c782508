"""The web console in a real browser: headless Debian Chromium, driven by Playwright, against
a real `tiller serve` app (the `serve` fixture: uvicorn on a free loopback port) serving the
offline demo agent, `tiller.examples.console_agent`, whose model is scripted by what is typed.

What a person does with the console, end to end: chat with a streamed answer and folded
reasoning, approve a held write (the file appears on disk), edit a held call's arguments,
deny one with a reason, answer a question, steer a working run, cancel one, open a run from
the list, and reload the page to find the thread rebuilt and a detached run followed again.

Needs /usr/bin/chromium (scripts/setup-browser.sh installs Debian's package) and the
`playwright` package of the dev extra, whose own driver talks to that browser: no browser
is ever downloaded. A screenshot of each scenario goes to test-artifacts/console/.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tiller.examples.console_agent import make_agent

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists() and os.environ.get("CI"):
    # CI installs it (the README's test command runs scripts/setup-system.sh --browser):
    # missing there is a broken setup, not a reason to skip.
    pytest.fail("/usr/bin/chromium is missing in CI: scripts/setup-browser.sh did not run")
if not CHROMIUM.exists():
    pytest.skip(
        "the console's browser test needs /usr/bin/chromium: run scripts/setup-browser.sh",
        allow_module_level=True,
    )
pytest.importorskip(
    "playwright.sync_api", reason="the console's browser test needs the dev extra's playwright"
)
from playwright.sync_api import (  # noqa: E402 (after the skips)
    Browser,
    ConsoleMessage,
    Locator,
    Page,
    Route,
    expect,
    sync_playwright,
)

TOKEN = "console-test-token"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
#: How long to wait for the page to show something (a cap against hangs, not a timing test).
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)
#: `slow N` takes a step this often: slow enough to steer, cancel or reload mid-run.
STEP_DELAY = 0.5
#: Enough steps that a run is still working whenever a test looks (it is cancelled after).
LONG_RUN = "slow 90"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            # Root in a container has no user namespaces for Chromium's own sandbox.
            args=["--no-sandbox"],
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def page(
    browser: Browser,
    serve: Callable[..., str],
    workspace: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Page]:
    """A fresh page (its own localStorage) on a fresh server, authenticated through the
    address's `#token=` fragment. JavaScript errors fail the test."""
    url = serve(make_agent(step_delay=STEP_DELAY), token=TOKEN, workspace=workspace)
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def on_console(message: ConsoleMessage) -> None:
        # A 401 is the wrong-token scenario's point, and the page reports it itself.
        if message.type == "error" and "status of 401" not in message.text:
            errors.append(message.text)

    page.on("console", on_console)
    page.goto(f"{url}/#token={TOKEN}")
    yield page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # The artifacts are never committed: their folder ignores itself.
    (ARTIFACTS.parent / ".gitignore").write_text("*\n")
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()
    assert not errors, f"the page logged errors: {errors}"


def by(page: Page, testid: str) -> Locator:
    return page.get_by_test_id(testid)


def send(page: Page, text: str) -> None:
    by(page, "chat-input").fill(text)
    by(page, "send").click()


def last_answer(page: Page) -> Locator:
    return by(page, "message-assistant").last


def run_item(page: Page, run_id: str) -> Locator:
    return page.locator(f'[data-testid="run-item"][data-run-id="{run_id}"]')


def current_run_id(page: Page) -> str:
    run_id = page.evaluate("localStorage.getItem('tiller.lastRunId')")
    assert isinstance(run_id, str) and run_id
    return run_id


def step_shown(page: Page) -> int:
    """The highest `Step N of M` the page shows."""
    steps = re.findall(r"Step (\d+) of", by(page, "messages").inner_text())
    return max((int(step) for step in steps), default=0)


# ── Scenarios ───────────────────────────────────────────────────────────────────────────


def test_chat_streams_the_answer_with_folded_reasoning(page: Page) -> None:
    # The token came from the fragment, which the page then took out of the address.
    assert "#token" not in page.url
    send(page, "hello there")
    expect(by(page, "message-user")).to_have_text(re.compile("hello there"))
    expect(last_answer(page)).to_contain_text("You said: hello there")
    expect(by(page, "run-state")).to_have_text("Finished")
    # Sent with Enter; the reasoning is there, folded away until opened.
    by(page, "chat-input").fill("think")
    by(page, "chat-input").press("Enter")
    expect(last_answer(page)).to_contain_text("Thought about it: all is well.")
    reasoning = by(page, "message-reasoning")
    expect(reasoning).to_have_count(1)
    expect(reasoning).not_to_have_attribute("open", "")
    reasoning.locator("summary").click()
    expect(reasoning).to_contain_text("The person wants to see me think")
    # The run is listed as finished; the usage and the state panels show the run's facts.
    status = run_item(page, current_run_id(page)).get_by_test_id("run-status")
    expect(status).to_have_text(re.compile("^finished"))
    expect(by(page, "usage")).to_contain_text("Steps")
    by(page, "state-panel").locator("summary").click()
    expect(by(page, "state-json")).to_contain_text('"usage"')


def test_approving_a_held_write_writes_the_file(page: Page, workspace: Path) -> None:
    target = workspace / "approved.txt"
    send(page, "write approved.txt: written by tiller")
    expect(by(page, "approve")).to_be_visible()
    expect(by(page, "interrupt-tool-name")).to_have_text("write_file")
    expect(by(page, "interrupt-args")).to_contain_text("approved.txt")
    expect(by(page, "run-state")).to_have_text("Waiting for you")
    # The agent planned a task first; the checklist shows it open.
    expect(by(page, "task")).to_have_attribute("data-status", "pending")
    expect(by(page, "task")).to_contain_text("Write approved.txt")
    assert not target.exists()  # held: nothing is written before a person says yes
    expect(by(page, "send")).to_be_disabled()
    by(page, "approve").click()
    expect(last_answer(page)).to_contain_text("Done: approved.txt is written.")
    expect(by(page, "run-state")).to_have_text("Finished")
    assert target.read_text() == "written by tiller"
    call = by(page, "tool-call").filter(has_text="write_file")
    expect(call).to_have_attribute("data-status", "done")
    expect(by(page, "task")).to_have_attribute("data-status", "completed")


def test_editing_a_held_calls_arguments(page: Page, workspace: Path) -> None:
    send(page, "write edited.txt: as the model wrote it")
    expect(by(page, "edit")).to_be_visible()
    by(page, "edit").click()
    editor = by(page, "edit-args")
    expect(editor).to_have_value(re.compile("as the model wrote it"))
    editor.fill('{"path": "edited.txt", "content": "as a person wrote it"}')
    by(page, "approve").click()
    expect(last_answer(page)).to_contain_text("Done: edited.txt is written.")
    assert (workspace / "edited.txt").read_text() == "as a person wrote it"


def test_denying_a_held_call_with_a_reason(page: Page, workspace: Path) -> None:
    send(page, "write denied.txt: nope")
    expect(by(page, "deny")).to_be_visible()
    by(page, "deny-reason").fill("not in this folder")
    by(page, "deny").click()
    expect(by(page, "run-state")).to_have_text("Finished")
    result = by(page, "tool-call").filter(has_text="write_file").get_by_test_id("tool-result")
    expect(result).to_contain_text("not in this folder")
    assert not (workspace / "denied.txt").exists()


def test_answering_a_question(page: Page) -> None:
    send(page, "ask")
    question = by(page, "question")
    expect(question).to_contain_text("Which color should the report use?")
    # The recommended option is chosen unless the person picks another.
    expect(question.get_by_label("red")).to_be_checked()
    question.get_by_label("blue").check()
    by(page, "question-note").fill("make it calm")
    by(page, "question-submit").click()
    expect(last_answer(page)).to_contain_text("Thanks.")
    expect(last_answer(page)).to_contain_text("blue")
    expect(last_answer(page)).to_contain_text("make it calm")


def test_steering_reaches_a_working_run(page: Page) -> None:
    send(page, LONG_RUN)
    expect(by(page, "steer-input")).to_be_visible()
    by(page, "steer-input").fill("use the blue one")
    by(page, "steer-send").click()
    expect(by(page, "messages")).to_contain_text("Heard: use the blue one.")
    by(page, "cancel").click()
    expect(by(page, "run-state")).to_have_text("Cancelled")
    expect(by(page, "steer")).to_be_hidden()


def test_steering_waits_for_the_server_to_start_the_run(page: Page) -> None:
    """The steer bar (steer, cancel) shows only once the run's RUN_STARTED came: before,
    the run id is only the page's, and a steer sent then asked about a run the server
    did not know yet (a 404 under load, and the steer was lost)."""
    held: list[Route] = []

    def hold(route: Route) -> None:  # the run's request waits here until released
        held.append(route)

    page.route("**/agui", hold)
    with page.expect_request("**/agui"):
        send(page, LONG_RUN)
    expect(by(page, "run-state")).to_have_text(re.compile("^Starting"))
    expect(by(page, "steer")).to_be_hidden()
    for _ in range(WAIT_MS // 50):  # the route's handler runs while Playwright waits
        if held:
            break
        page.wait_for_timeout(50)
    assert len(held) == 1
    held[0].continue_()
    expect(by(page, "steer")).to_be_visible()
    expect(by(page, "run-state")).to_have_text(re.compile("^Working"))
    by(page, "cancel").click()
    expect(by(page, "run-state")).to_have_text("Cancelled")


def test_cancelling_a_run(page: Page) -> None:
    send(page, LONG_RUN)
    expect(by(page, "cancel")).to_be_visible()
    run_id = current_run_id(page)
    # Listed while it works.
    expect(run_item(page, run_id).get_by_test_id("run-status")).to_have_text("running")
    by(page, "cancel").click()
    expect(by(page, "run-state")).to_have_text("Cancelled")
    status = run_item(page, run_id).get_by_test_id("run-status")
    expect(status).to_have_text("finished (cancelled)")
    expect(by(page, "send")).to_be_enabled()


def test_reload_restores_the_thread_and_reattaches(page: Page) -> None:
    send(page, "hello again")
    expect(by(page, "run-state")).to_have_text("Finished")
    send(page, LONG_RUN)
    expect(by(page, "messages")).to_contain_text("Step 1 of 90.")
    thread_id = by(page, "thread-id").inner_text()
    page.reload()
    # Rebuilt from the last run's events: the whole thread, and the run still working.
    expect(by(page, "thread-id")).to_have_text(thread_id)
    expect(by(page, "message-user")).to_have_count(2)
    expect(by(page, "message-user").first).to_have_text(re.compile("hello again"))
    expect(by(page, "message-assistant").first).to_contain_text("You said: hello again")
    expect(by(page, "run-state")).to_have_text(re.compile("^Working"))
    expect(by(page, "steer")).to_be_visible()
    # Followed live: a step the run takes after the reload shows up.
    seen = step_shown(page)
    expect(by(page, "messages")).to_contain_text(f"Step {seen + 1} of 90.")
    by(page, "cancel").click()
    expect(by(page, "run-state")).to_have_text("Cancelled")


def test_new_thread_and_opening_a_run_from_the_list(page: Page) -> None:
    send(page, "hello from the first thread")
    expect(by(page, "run-state")).to_have_text("Finished")
    first_thread = by(page, "thread-id").inner_text()
    first_run = current_run_id(page)
    by(page, "new-thread").click()
    expect(by(page, "thread-id")).not_to_have_text(first_thread)
    expect(by(page, "message-user")).to_have_count(0)
    run_item(page, first_run).locator("button").click()
    expect(by(page, "thread-id")).to_have_text(first_thread)
    expect(by(page, "message-user")).to_have_text(re.compile("hello from the first thread"))
    expect(by(page, "message-assistant")).to_contain_text("You said: hello from the first")


def test_a_wrong_token_is_reported(page: Page) -> None:
    by(page, "token").fill("not-the-token")
    by(page, "token").dispatch_event("change")
    send(page, "hello?")
    expect(by(page, "banner")).to_contain_text("token")
    # Not sent: the text is back in the box, and not in the thread.
    expect(by(page, "chat-input")).to_have_value("hello?")
    expect(by(page, "message-user")).to_have_count(0)


def test_the_dom_helper_refuses_handler_strings_and_script_urls(page: Page) -> None:
    """Renderers (the tools.js registry) build nodes with `h` from a model's arguments,
    which are untrusted: a string `on*` prop is not made an attribute (it would run as
    code), and an `href`/`src` is kept only when it is http(s), mailto or relative."""
    expect(by(page, "send")).to_be_visible()  # the console has loaded
    built = page.evaluate(
        """async () => {
            const { h } = await import(new URL("console/dom.js", document.baseURI).href);
            // A detached <a> loads nothing, whatever its src (an <img> would fetch it).
            const html = (props) => h("a", props).outerHTML;
            let clicked = false;
            const button = h("button", { onclick: () => { clicked = true; } });
            button.click();
            return {
                handlerString: html({ onclick: "alert(1)", onmouseover: "alert(2)" }),
                handler: clicked,
                script: html({ href: "javascript:alert(1)" }),
                scriptCase: html({ href: " JaVaScRiPt:alert(1)" }),
                scriptTab: html({ href: "java\\tscript:alert(1)" }),
                data: html({ src: "data:text/html,<script>alert(1)</script>" }),
                https: html({ href: "https://example.com/a?b=1" }),
                http: html({ href: "http://example.com/" }),
                mailto: html({ href: "mailto:a@example.com" }),
                relative: html({ href: "runs/r1" }),
                rooted: html({ src: "/console/x.png" }),
                fragment: html({ href: "#top" }),
            };
        }"""
    )
    assert built["handlerString"] == "<a></a>"
    assert built["handler"] is True  # a function is still a listener
    assert built["script"] == built["scriptCase"] == built["scriptTab"] == "<a></a>"
    assert built["data"] == "<a></a>"
    assert built["https"] == '<a href="https://example.com/a?b=1"></a>'
    assert built["http"] == '<a href="http://example.com/"></a>'
    assert built["mailto"] == '<a href="mailto:a@example.com"></a>'
    assert built["relative"] == '<a href="runs/r1"></a>'
    assert built["rooted"] == '<a src="/console/x.png"></a>'
    assert built["fragment"] == '<a href="#top"></a>'
