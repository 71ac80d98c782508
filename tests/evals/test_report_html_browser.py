"""The HTML report in a real browser: headless Debian Chromium, driven by Playwright,
opening the report file from disk (file://) with every network request refused, as a
machine with no internet would.

It checks that the page opens without errors, that plotly.js (inlined) drew every plot,
that a run's link and a plot's point both open that run's transcript, and that the
`<script>` a model wrote stays text. A full-page screenshot of the report, and of the
comparison, goes to test-artifacts/evals/.

Needs /usr/bin/chromium (scripts/setup-browser.sh) and the dev extra's `playwright` and
`plotly`; no browser is ever downloaded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists() and os.environ.get("CI"):
    # CI installs it: missing there is a broken setup, not a reason to skip.
    pytest.fail("/usr/bin/chromium is missing in CI: scripts/setup-browser.sh did not run")
if not CHROMIUM.exists():
    pytest.skip(
        "the report's browser test needs /usr/bin/chromium: run scripts/setup-browser.sh",
        allow_module_level=True,
    )
pytest.importorskip(
    "playwright.sync_api", reason="the report's browser test needs the dev extra's playwright"
)
pytest.importorskip("plotly", reason="the HTML report needs the report extra's plotly")
from playwright.sync_api import (  # noqa: E402 (after the skips)
    Browser,
    ConsoleMessage,
    Page,
    Route,
    expect,
    sync_playwright,
)

from tiller.evals import write_html_report  # noqa: E402

from ._report_support import Reports, run_reports_now  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "evals"
#: How long to wait for the page (a cap against hangs, not a timing test).
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)
REPORT_PLOTS = ("plot-scores", "plot-cost", "plot-pass-at-k")
COMPARISON_PLOTS = ("plot-compare-cases", "plot-compare-scorers")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Reports:
    return run_reports_now(tmp_path_factory.mktemp("store"))


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


class Opened:
    """A page on a report file, what it tried to fetch, and what went wrong on it."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.requests: list[str] = []


@pytest.fixture
def open_report(browser: Browser) -> Iterator[Callable[[Path, str], Opened]]:
    """Opens a report file in a fresh page that may fetch nothing but that file; after
    the test, saves a full-page screenshot and fails on any error the page logged."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened: list[tuple[Opened, str]] = []

    def refuse_network(route: Route) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            opened[-1][0].requests.append(route.request.url)
            route.abort()

    context.route("**/*", refuse_network)

    def open_file(path: Path, screenshot: str) -> Opened:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        here = Opened(page)
        page.on("pageerror", lambda error: here.errors.append(str(error)))

        def on_console(message: ConsoleMessage) -> None:
            if message.type == "error":
                here.errors.append(message.text)

        page.on("console", on_console)
        opened.append((here, screenshot))
        page.goto(path.as_uri())
        expect(page.locator("body")).to_have_attribute("data-plots", "drawn")
        return here

    yield open_file
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # The artifacts are never committed: their folder ignores itself.
    (ARTIFACTS / ".gitignore").write_text("*\n")
    for here, screenshot in opened:
        here.page.evaluate("window.scrollTo(0, 0)")
        here.page.screenshot(path=str(ARTIFACTS / screenshot), full_page=True)
    context.close()
    for here, _ in opened:
        assert not here.errors, f"the page logged errors: {here.errors}"
        assert not here.requests, f"the page tried the network: {here.requests}"


def _assert_plots_drawn(page: Page, plot_ids: tuple[str, ...]) -> None:
    for plot_id in plot_ids:
        svg = page.locator(f"#{plot_id}.js-plotly-plot .main-svg").first
        expect(svg).to_be_visible()
        box = svg.bounding_box()
        assert box is not None and box["width"] > 200 and box["height"] > 150, plot_id
        # Drawn with data: the plot has marks (bars, points or lines), not only axes.
        marks = page.locator(f"#{plot_id} .trace")
        assert marks.count() > 0, f"{plot_id} has no traces drawn"


def test_the_report_opens_offline_draws_its_plots_and_links_every_case(
    reports: Reports, open_report: Callable[[Path, str], Opened], tmp_path: Path
) -> None:
    path = write_html_report(reports.after, tmp_path / "report.html")
    page = open_report(path, "report.png").page

    _assert_plots_drawn(page, REPORT_PLOTS)
    expect(page.locator("#comparison")).to_have_count(0)

    # A run's link opens its transcript, closed until then.
    section = page.locator("#case-lookup-e1")
    expect(section).not_to_have_attribute("open", "")
    page.locator('table.runs a[href="#case-lookup-e1"]').click()
    expect(section).to_have_attribute("open", "")
    expect(section.locator(".tool-call code", has_text="look")).to_be_visible()
    expect(section.locator(".tool-result pre")).to_contain_text("100 degrees Celsius")
    assert page.evaluate("location.hash") == "#case-lookup-e1"
    assert page.evaluate(
        "(() => { const r = document.getElementById('case-lookup-e1').getBoundingClientRect();"
        " return r.top >= 0 && r.top < window.innerHeight; })()"
    )

    # The model's <script> is text on the page, and ran nothing.
    page.locator('table.runs a[href="#case-xss-e0"]').click()
    xss = page.locator("#case-xss-e0")
    expect(xss.locator(".msg-assistant .text")).to_contain_text("<script>document.body")
    assert page.evaluate("document.body.dataset.pwned") is None
    assert page.locator("#case-xss-e0 script, #case-xss-e0 img").count() == 0

    # A point of the cost plot opens its run.
    page.evaluate("window.scrollTo(0, 0)")
    point = page.locator("#plot-cost .scatterlayer .point").first
    point.scroll_into_view_if_needed()
    point.click(force=True)
    expect(page).to_have_url(re.compile(r"#case-[a-z]+-e[0-2]$"))
    hash_ = page.evaluate("location.hash")
    expect(page.locator(hash_)).to_have_attribute("open", "")

    # A histogram's bar is many runs: a click opens the bin's first one.
    page.evaluate("window.scrollTo(0, 0)")
    page.evaluate("history.replaceState(null, '', location.pathname)")
    bar = page.locator("#plot-scores .bars .point path").first
    bar.scroll_into_view_if_needed()
    bar.click(force=True)
    expect(page).to_have_url(re.compile(r"#case-[a-z]+-e[0-2]$"))
    expect(page.locator(page.evaluate("location.hash"))).to_have_attribute("open", "")

    # The filter shows only the failed runs.
    page.locator('.filters button[data-filter="fail"]').click()
    shown = page.locator("table.runs tbody tr:visible")
    assert shown.count() > 0
    assert set(shown.evaluate_all("rows => rows.map(r => r.dataset.standing)")) == {"fail"}
    page.locator('.filters button[data-filter="all"]').click()

    # An address typed by hand with a stray "%" opens nothing, and breaks nothing (the
    # fixture fails the test on any error the page logs).
    page.evaluate("location.hash = '%zz'")
    expect(page).to_have_url(re.compile(r"#%zz$"))
    page.evaluate("new Promise(resolve => requestAnimationFrame(resolve))")


def test_the_comparison_view_draws_before_and_after(
    reports: Reports, open_report: Callable[[Path, str], Opened], tmp_path: Path
) -> None:
    path = write_html_report(reports.after, tmp_path / "compare.html", compare=reports.before)
    page = open_report(path, "report-compare.png").page

    _assert_plots_drawn(page, REPORT_PLOTS + COMPARISON_PLOTS)
    comparison = page.locator("#comparison")
    expect(comparison.locator('tr[data-change="regressed"] td').first).to_have_text("capital")
    # A regression's baseline run is one click away too.
    comparison.locator('a[href="#before-case-capital-e0"]').click()
    expect(page.locator("#before-case-capital-e0")).to_have_attribute("open", "")
    expect(page.locator("#before-case-capital-e0 .msg-assistant .text")).to_have_text("Paris.")


def test_the_bundled_invoice_eval_runs_from_the_cli_and_its_report_opens(
    open_report: Callable[[Path, str], Opened], tmp_path: Path
) -> None:
    """The issue's "done when": `tiller eval run examples/invoice_eval/eval.py` from the
    repository's root, offline, and its HTML report opens in Chromium."""
    root = Path(__file__).resolve().parents[2]
    report = tmp_path / "invoice.html"
    command = [sys.executable, "-m", "tiller", "eval", "run", "examples/invoice_eval/eval.py"]
    command += ["--store", f"sqlite:///{tmp_path / 'evals.db'}", "--html", str(report)]
    done = subprocess.run(
        command,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "runs 20  scored 20  passed 16 (80.0%)" in done.stdout
    page = open_report(report, "invoice-eval.png").page
    _assert_plots_drawn(page, REPORT_PLOTS)
    first = page.locator('table.runs a[href^="#case-"]').first
    anchor = first.get_attribute("href")
    assert anchor is not None
    first.click()
    expect(page.locator(anchor)).to_have_attribute("open", "")
    assert page.evaluate("location.hash") == anchor
