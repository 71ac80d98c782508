"""The web console for the people who use an app: plain words, labels, layout, what the
stream carries (subagents, compaction, live output), an app's own tool renderers, the
keyboard, and an automated accessibility check (axe-core, injected into the page).

Same browser, server and demo agent as `test_console_browser.py` (its fixtures and helpers
are shared); a second module so each stays bounded in time on a small machine. axe-core
comes from npm, pinned in tests/serve/node (scripts/setup-browser.sh runs `npm ci` there).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tiller.examples.console_agent import make_agent

from . import test_console_browser as shared
from .test_console_browser import ARTIFACTS, STEP_DELAY, TOKEN, WAIT_MS, by, last_answer, send

# The shared fixtures: the browser (one per module), a fresh page on a fresh server, and
# the server's workspace.
browser = shared.browser
page = shared.page
workspace = shared.workspace

AXE = Path(__file__).with_name("node") / "node_modules" / "axe-core" / "axe.min.js"


def open_page(browser: Browser, url: str, name: str) -> Iterator[Page]:
    """A page on `url` whose JavaScript errors fail the test; screenshot at the end."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    yield page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS.parent / ".gitignore").write_text("*\n")
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    context.close()
    assert not errors, f"the page logged errors: {errors}"


@pytest.fixture
def no_auth_page(
    browser: Browser,
    serve: Callable[..., str],
    workspace: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Page]:
    url = serve(
        make_agent(step_delay=STEP_DELAY),
        token=None,
        workspace=workspace,
        store=f"sqlite:///{tmp_path / 'no-auth.db'}",
    )
    yield from open_page(browser, f"{url}/", request.node.name)


RENDERERS = """
const { registerToolRenderer } = window.tillerConsole;
registerToolRenderer("build", {
  render: ({ args, status, result, progress, h }) =>
    h("div", { class: "build-card", "data-testid": "build-card", "data-status": status },
      h("strong", {}, `Build of ${args?.lines ?? "?"} stages`),
      " ",
      status === "done" ? "passed" : "in progress",
      progress?.output ? h("div", {}, `${progress.output.split("\\n").length - 1} lines`) : null),
});
registerToolRenderer("write_file", {
  describe: ({ args }) => `Save a note called ${args?.path}`,
  // A string is shown as text: never markup, even when the model wrote some.
  render: ({ args }) => `note: ${args?.content ?? ""}`,
});
"""


@pytest.fixture
def app_page(
    browser: Browser,
    serve: Callable[..., str],
    workspace: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Page]:
    script = tmp_path / "renderers.js"
    script.write_text(RENDERERS)
    url = serve(
        make_agent(step_delay=0.05), token=TOKEN, workspace=workspace, console_scripts=[script]
    )
    yield from open_page(browser, f"{url}/#token={TOKEN}", request.node.name)


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """The serious and critical violations axe-core finds on the page as it is now."""
    if not AXE.is_file():
        message = f"axe-core is not installed ({AXE}): run scripts/setup-browser.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    page.add_script_tag(content=AXE.read_text())
    result = page.evaluate(
        "axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map(v => "
        "({id: v.id, impact: v.impact, help: v.help, "
        "nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)})))"
    )
    return [v for v in result if v["impact"] in ("serious", "critical")]


# ── Plain words ─────────────────────────────────────────────────────────────────────────


def test_the_approval_card_says_what_the_agent_wants_in_plain_words(page: Page) -> None:
    send(page, "write plain.txt: hello")
    summary = by(page, "interrupt-summary")
    expect(summary).to_have_text("The agent wants to write the file plain.txt.")
    # The arguments as a list a person reads, not JSON.
    expect(by(page, "interrupt-args")).to_contain_text("content")
    expect(by(page, "interrupt-args")).not_to_contain_text("{")
    # The policy's own words are there, behind a disclosure.
    why = by(page, "interrupt-why")
    expect(why).not_to_have_attribute("open", "")
    expect(by(page, "interrupt-reason")).to_be_hidden()
    why.locator("summary").click()
    expect(by(page, "interrupt-reason")).to_contain_text("ask mode asks before file_mutation")
    expect(by(page, "interrupt-risk")).to_have_text("file_mutation")
    assert "ask mode" not in summary.inner_text()


def test_model_text_is_shown_as_text_never_as_markup(page: Page, workspace: Path) -> None:
    send(page, "write evil.txt: <img src=x onerror=window.pwned=1><b>bold</b>")
    expect(by(page, "interrupt-args")).to_contain_text("<img src=x onerror=window.pwned=1>")
    by(page, "approve").click()
    expect(last_answer(page)).to_contain_text("Done: evil.txt is written.")
    assert page.evaluate("window.pwned") is None
    assert page.locator("[data-testid=messages] img, [data-testid=messages] b").count() == 0


def test_every_usage_and_budget_field_has_a_label(page: Page) -> None:
    send(page, "hello")
    expect(by(page, "run-state")).to_have_text("Finished")
    usage = by(page, "usage")
    expect(usage).to_contain_text("Input tokens")
    expect(usage).to_contain_text("Cost")
    # A budget with limits, and a field this console has never heard of.
    page.evaluate(
        """import('./console/view.js').then(({ renderUsage }) => renderUsage(
            document.querySelector('[data-testid=usage]'),
            document.querySelector('[data-testid=budget]'),
            {tiller: {usage: {inputTokens: 1200, costUsd: 0.5, cacheReadTokens: 3},
                      budget: {maxSteps: 20, spentSteps: 3, maxCostUsd: 2, spentCostUsd: 0.5,
                               spentTurns: 4}}}))"""
    )
    budget = by(page, "budget")
    expect(budget).to_be_visible()
    expect(budget).to_contain_text("Steps")
    expect(budget).to_contain_text("3 of 20")
    expect(budget).to_contain_text("$0.5000 of $2.0000")
    expect(budget).to_contain_text("Spent turns")
    panel = usage.inner_text() + budget.inner_text()
    assert not re.search(r"\b[a-z]+[A-Z]\w*", panel), panel  # no raw camelCase keys


# ── Layout ──────────────────────────────────────────────────────────────────────────────


def test_the_token_field_shows_only_when_the_server_wants_a_token(
    page: Page, no_auth_page: Page
) -> None:
    expect(by(page, "token-field")).to_be_visible()
    expect(by(no_auth_page, "token-field")).to_be_hidden()
    send(no_auth_page, "hello without a token")
    expect(last_answer(no_auth_page)).to_contain_text("You said: hello without a token")


def test_the_composer_stays_pinned_to_the_bottom(page: Page) -> None:
    for n in range(8):
        send(page, f"message number {n} " + "with some words to fill the line " * 6)
        expect(by(page, "run-state")).to_have_text("Finished")
    height = page.viewport_size["height"] if page.viewport_size else 900
    assert page.evaluate("document.documentElement.scrollHeight") > height  # it scrolls
    for scroll in ("window.scrollTo(0, 0)", "window.scrollTo(0, document.body.scrollHeight)"):
        page.evaluate(scroll)
        box = by(page, "composer").bounding_box()
        assert box is not None
        assert height - 60 <= box["y"] + box["height"] <= height, (scroll, box)
    # A request for the person is brought into view, clear of the docked composer.
    page.evaluate("window.scrollTo(0, 0)")
    send(page, "write pinned.txt: seen")
    expect(by(page, "approve")).to_be_visible()
    approve, composer = by(page, "approve").bounding_box(), by(page, "composer").bounding_box()
    assert approve is not None and composer is not None
    assert approve["y"] >= 0 and approve["y"] + approve["height"] <= composer["y"], approve


def test_runs_are_grouped_by_thread_and_named_by_its_first_message(page: Page) -> None:
    send(page, "plan the garden")
    expect(by(page, "run-state")).to_have_text("Finished")
    send(page, "and the shed")
    expect(by(page, "run-state")).to_have_text("Finished")
    by(page, "new-thread").click()
    send(page, "write the report")
    expect(by(page, "run-state")).to_have_text("Finished")
    by(page, "refresh-runs").click()
    groups = by(page, "thread-group")
    expect(groups).to_have_count(2)
    garden = groups.filter(has_text="plan the garden")
    expect(garden.get_by_test_id("thread-title")).to_have_text("plan the garden")
    expect(garden.get_by_test_id("run-item")).to_have_count(2)
    expect(groups.first.get_by_test_id("thread-title")).to_have_text("write the report")
    # No raw ids in what a person reads; the top bar names the thread the same way.
    assert "thread-" not in by(page, "runs-list").inner_text()
    expect(by(page, "thread-name")).to_have_text("write the report")


# ── What the stream carries ─────────────────────────────────────────────────────────────


def test_a_subagent_segment_is_nested_collapsible_with_its_own_status(page: Page) -> None:
    send(page, "delegate")
    expect(last_answer(page)).to_contain_text("The helper has looked around")
    call = by(page, "tool-call").filter(has=page.get_by_test_id("tool-name").get_by_text("agent"))
    segment = call.get_by_test_id("subagent")
    expect(segment).to_have_count(1)
    expect(segment.get_by_test_id("subagent-title")).to_have_text("Look around the workspace")
    expect(segment.get_by_test_id("subagent-status")).to_have_text("done")
    # The helper's own messages and calls are inside it, not in the main conversation.
    expect(segment.get_by_test_id("message-assistant").first).to_contain_text("Listing")
    expect(segment.get_by_test_id("tool-name")).to_have_text("list_dir")
    top = page.locator("[data-testid=messages] > li > [data-testid=message-text]")
    expect(top.filter(has_text="Listing the workspace.")).to_have_count(0)
    expect(segment).to_have_attribute("open", "")
    segment.locator("summary").first.click()
    expect(segment).not_to_have_attribute("open", "")


def test_a_compaction_is_noticed(page: Page) -> None:
    send(page, "compact")
    expect(last_answer(page)).to_contain_text("Carried on after compacting.")
    notice = by(page, "compaction-notice")
    expect(notice).to_have_count(1)
    expect(notice).to_contain_text("compacted to stay within the model's context")
    expect(notice).to_contain_text("2 old results were replaced by a newer one")


def test_a_long_command_shows_its_progress_and_output_live(page: Page) -> None:
    send(page, "build 8")
    call = by(page, "tool-call").filter(has_text="build")
    # While it works: the lines so far, and how far along it is.
    expect(call.get_by_test_id("tool-output")).to_contain_text("[2/8] compiling module_2.py")
    expect(call).to_have_attribute("data-status", "running")
    expect(call.get_by_test_id("tool-progress")).to_contain_text("stage")
    expect(call.get_by_test_id("tool-progress-bar")).to_be_visible()
    assert "[8/8]" not in call.get_by_test_id("tool-output").inner_text()
    # Then all of it, and the call is done.
    expect(call).to_have_attribute("data-status", "done")
    expect(call.get_by_test_id("tool-output")).to_contain_text("[8/8] compiling module_8.py")
    expect(call.get_by_test_id("tool-progress")).to_have_text("stage 8 of 8")


# ── An app's own renderers ──────────────────────────────────────────────────────────────


def test_an_app_renders_its_tools_with_its_own_components(app_page: Page) -> None:
    page = app_page
    send(page, "build 3")
    card = by(page, "build-card")
    expect(card).to_have_attribute("data-status", "done")
    expect(card).to_contain_text("Build of 3 stages passed")
    # The app describes a held call in its own words; a string it returns is text.
    send(page, "write n.txt: <i>hi</i>")
    expect(by(page, "interrupt-summary")).to_have_text(
        "The agent wants to save a note called n.txt."
    )
    by(page, "approve").click()
    expect(last_answer(page)).to_contain_text("Done: n.txt is written.")
    custom = by(page, "tool-call").filter(has_text="write_file").get_by_test_id("tool-custom")
    expect(custom).to_have_text("note: <i>hi</i>")
    assert custom.locator("i").count() == 0


# ── Keyboard and accessibility ──────────────────────────────────────────────────────────


def focused(page: Page) -> str:
    return str(page.evaluate("document.activeElement?.dataset?.testid ?? ''"))


def tab_to(page: Page, testid: str, key: str = "Tab", most: int = 40) -> None:
    for _ in range(most):
        if focused(page) == testid:
            return
        page.keyboard.press(key)
    raise AssertionError(f"{key} never reached {testid} (stuck on {focused(page)!r})")


def test_keyboard_only_send_edit_escape_and_approve(page: Page, workspace: Path) -> None:
    page.locator("body").focus()
    tab_to(page, "chat-input")
    page.keyboard.type("write keys.txt: typed by keys")
    page.keyboard.press("Enter")
    expect(by(page, "approve")).to_be_visible()
    # Back from the composer to the card, Edit opens the editor, Escape cancels it.
    tab_to(page, "edit", key="Shift+Tab")
    page.keyboard.press("Enter")
    expect(by(page, "edit-args")).to_be_visible()
    assert focused(page) == "edit-args"
    page.keyboard.type("not json")
    page.keyboard.press("Escape")
    expect(by(page, "edit-args")).to_be_hidden()
    assert focused(page) == "edit"
    expect(by(page, "edit-args")).not_to_have_value(re.compile("not json"))
    tab_to(page, "approve", key="Shift+Tab")
    page.keyboard.press("Enter")
    expect(last_answer(page)).to_contain_text("Done: keys.txt is written.")
    assert (workspace / "keys.txt").read_text() == "typed by keys"


def test_the_page_passes_axe_with_no_serious_violations(page: Page) -> None:
    assert axe_violations(page) == []  # the empty page
    send(page, "delegate")
    expect(last_answer(page)).to_contain_text("The helper has looked around")
    send(page, "compact")
    expect(last_answer(page)).to_contain_text("Carried on after compacting.")
    send(page, "write a11y.txt: checked")
    expect(by(page, "approve")).to_be_visible()
    by(page, "interrupt-why").locator("summary").click()
    # A conversation, a subagent, commands' output, a compaction notice, an approval card.
    assert axe_violations(page) == []
