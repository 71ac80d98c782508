"""The HTML report, read as HTML: every run has its section and its link, model output is
text and never markup, the file needs nothing from the network, the comparison view is
there only with a baseline, and without Plotly the error says what to install.

The reports are real: two evals run by scripted agents on a SQLite store and read back
(`_report_support`). The browser's view of the same pages is test_report_html_browser.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tiller.errors import UsageError
from tiller.evals import EvalReport, render_html_report, write_html_report

from ._report_support import XSS, Reports, run_reports_now

pytest.importorskip("plotly", reason="the HTML report needs the report extra's plotly")
from plotly.offline import get_plotlyjs


class Page(HTMLParser):
    """What a page is made of, as a browser's parser sees it: every element's tag and
    attributes, in order, and the text of its scripts."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data

    def ids(self) -> list[str]:
        return [attrs["id"] or "" for _, attrs in self.elements if "id" in attrs]

    def hrefs(self) -> list[str]:
        return [
            attrs["href"] or "" for tag, attrs in self.elements if tag == "a" and "href" in attrs
        ]

    def tags(self, name: str) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.elements if tag == name]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Reports:
    return run_reports_now(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def page(reports: Reports) -> str:
    return render_html_report(reports.after)


@pytest.fixture(scope="module")
def compared(reports: Reports) -> str:
    return render_html_report(reports.after, compare=reports.before)


def test_every_run_has_one_section_and_the_runs_table_links_to_it(
    reports: Reports, page: str
) -> None:
    parsed = Page(page)
    ids = parsed.ids()
    assert len(ids) == len(set(ids)), "an id is used twice"
    anchors = [f"case-{r.case.id}-e{r.epoch}" for r in reports.after.results]
    assert len(anchors) == 15
    for anchor in anchors:
        assert anchor in ids
        assert f"#{anchor}" in parsed.hrefs()
    sections = [attrs for attrs in parsed.tags("details") if "run" in (attrs["class"] or "")]
    assert [attrs["id"] for attrs in sections] == anchors
    # Every in-page link goes somewhere on the page.
    for href in parsed.hrefs():
        assert href.startswith("#") and href[1:] in ids, href


def test_model_output_and_scorer_errors_are_text_never_markup(page: str) -> None:
    parsed = Page(page)
    assert XSS not in page
    assert "&lt;script&gt;document.body.dataset.pwned" in page
    # The page's own three scripts (the figures' data, plotly.js, the page's behaviour),
    # and no element a model wrote.
    assert len(parsed.tags("script")) == 3
    assert parsed.tags("img") == []
    assert "cannot judge this &lt;b&gt;odd&lt;/b&gt; answer" in page
    assert parsed.tags("b") == []


def test_the_plots_data_cannot_close_its_script(reports: Reports) -> None:
    # A run whose case id could carry markup cannot exist (ids are checked), but a
    # scorer's name, shown in the plots' legends and hover text, is any string.
    (first, *rest) = reports.after.results
    odd_name = "</script><script>alert(1)</script>"
    renamed = dataclasses.replace(first, scores={odd_name: next(iter(first.scores.values()))})
    report = EvalReport.build("odd-scorer", 3, 15, [renamed, *rest])
    parsed = Page(render_html_report(report))
    assert len(parsed.tags("script")) == 3
    figures = json.loads(parsed.scripts[0])
    names = [trace.get("name") for figure in figures for trace in figure["figure"]["data"]]
    assert odd_name in names


def test_the_file_needs_no_network_and_carries_plotly_once(page: str, compared: str) -> None:
    plotly_start = get_plotlyjs()[:300]
    for text in (page, compared):
        parsed = Page(text)
        assert all("src" not in attrs for attrs in parsed.tags("script"))
        assert parsed.tags("link") == [] and parsed.tags("iframe") == []
        assert text.count(plotly_start) == 1
        assert all(href.startswith("#") for href in parsed.hrefs())


def test_beside_plotly_js_the_page_is_small(page: str, compared: str) -> None:
    # 15 runs with their transcripts, scorecard, plots' data and styles: well under
    # 200 kB; plotly.js (about 4.8 MB) is the bulk, once.
    plotly_js = len(get_plotlyjs())
    assert len(page.encode()) - plotly_js < 200_000
    assert len(compared.encode()) - plotly_js < 250_000


def test_the_plots_points_carry_the_anchors_of_their_runs(reports: Reports, page: str) -> None:
    parsed = Page(page)
    figures = {figure["id"]: figure["figure"] for figure in json.loads(parsed.scripts[0])}
    assert list(figures) == ["plot-scores", "plot-cost", "plot-pass-at-k"]
    ids = set(parsed.ids())
    cost_points = [a for trace in figures["plot-cost"]["data"] for a in trace["customdata"]]
    assert sorted(cost_points) == sorted(
        f"case-{r.case.id}-e{r.epoch}" for r in reports.after.results
    )
    histogram = [a for trace in figures["plot-scores"]["data"] for a in trace["customdata"]]
    assert set(histogram) <= ids and len(histogram) == 30  # 15 runs, 2 scorers
    curves = {trace["name"]: trace["y"] for trace in figures["plot-pass-at-k"]["data"]}
    summary = reports.after.scorers["includes"]
    assert curves["includes pass@k"] == [summary.pass_at_k[k] for k in (1, 2, 3)]
    assert curves["includes pass^k"] == [summary.pass_hat_k[k] for k in (1, 2, 3)]


def test_the_scorecard_and_totals_say_what_the_report_says(reports: Reports, page: str) -> None:
    report = reports.after
    assert f"{report.scored} / {report.total}" in page
    assert f"{report.pass_rate:.0%}" in page
    for k in (1, 2, 3):
        assert f'<th class="num">k={k}</th>' in page
    includes = report.scorers["includes"]
    assert (
        f'title="pass@2 {includes.pass_at_k[2]:.1%}, pass^2 {includes.pass_hat_k[2]:.1%}"' in page
    )
    # The scorer that raised on `odd`: its errors counted, each traceback in the run.
    assert report.scorers["brevity"].errors == 3
    assert page.count('<details class="traceback" open><summary>traceback') == 3
    odd = page[page.index('id="case-odd-e0"') : page.index('id="case-odd-e1"')]
    assert (
        '<code>brevity</code></td><td class="num">0.00</td><td><span class="badge badge-error">'
        in odd
    )


def test_a_run_shows_its_transcript_tool_calls_and_results(page: str) -> None:
    start = page.index('id="case-lookup-e0"')
    section = page[start : page.index('id="case-lookup-e1"')]
    assert "Look up the boiling point of water." in section
    assert "→ calls <code>look</code>" in section
    assert "&quot;topic&quot;: &quot;water&quot;" in section  # the arguments, indented JSON
    assert "water: 100 degrees Celsius at sea level" in section  # the tool's result
    assert "Water boils at 100 °C at sea level." in section
    assert "looked for &#x27;100&#x27;" in section  # the scorer's explanation


def test_a_run_that_ended_in_an_error_shows_its_traceback(reports: Reports) -> None:
    # A run the scorers failed (a run they passed is a pass, as the report counts it,
    # its error still shown in its row).
    first = next(r for r in reports.after.results if r.case.id == "xss")
    rest = [r for r in reports.after.results if r is not first]
    traceback = 'Traceback (most recent call last):\n  ...\nValueError: bad <input value="x">'
    failed = dataclasses.replace(first, outcome=dataclasses.replace(first.outcome, error=traceback))
    report = EvalReport.build("errored", 3, 15, [failed, *rest])
    assert report.errors == 1
    text = render_html_report(report)
    assert '<pre class="traceback scroll">Traceback (most recent call last):' in text
    assert "ValueError: bad &lt;input value=&quot;x&quot;&gt;" in text
    assert Page(text).tags("input") == []
    row = text[
        text.index('<tr data-standing="error"><td><a class="case-link" href="#case-xss-e0">') :
    ]
    assert row.index("ValueError: bad") < row.index("</tr>")  # the error's last line


def test_the_comparison_view_is_there_only_with_a_baseline(page: str, compared: str) -> None:
    assert 'id="comparison"' not in page and "before-case-" not in page
    parsed = Page(compared)
    ids = set(parsed.ids())
    assert {"comparison", "plot-compare-cases", "plot-compare-scorers"} <= ids
    figures = [figure["id"] for figure in json.loads(parsed.scripts[0])]
    assert figures[-2:] == ["plot-compare-cases", "plot-compare-scorers"]
    changes = {
        attrs["data-change"] for attrs in parsed.tags("tr") if attrs.get("data-change") is not None
    }
    assert changes == {"regressed", "improved", "added", "removed"}
    assert (
        '<tr data-change="regressed"><td><a class="case-link" href="#case-capital-e0">capital</a>'
        in compared
    )
    assert "100% → 67%" in compared
    # The baseline's runs of the changed cases are on the page too; an unchanged case's
    # are not, and every link to a run goes somewhere.
    assert {"before-case-capital-e0", "before-case-arith-e1", "before-case-gone-e0"} <= ids
    assert not any(anchor.startswith("before-case-lookup") for anchor in ids)
    for href in parsed.hrefs():
        assert href[1:] in ids, href


def test_write_makes_the_folder_and_refuses_a_folder(reports: Reports, tmp_path: Path) -> None:
    written = write_html_report(reports.after, tmp_path / "out" / "report.html")
    assert written == tmp_path / "out" / "report.html"
    assert written.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    with pytest.raises(UsageError, match="is a folder: give the HTML report a file name"):
        write_html_report(reports.after, tmp_path)


def test_an_empty_eval_still_draws_a_page() -> None:
    text = render_html_report(EvalReport.build("empty", 1, 0, []))
    assert "No run was scored yet." in text
    assert len(json.loads(Page(text).scripts[0])) == 3


def test_only_reports_are_drawn(reports: Reports) -> None:
    with pytest.raises(UsageError, match="drawn from an EvalReport"):
        render_html_report("report.json")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="compare= takes the baseline's EvalReport"):
        render_html_report(reports.after, compare="before")  # type: ignore[arg-type]


def test_without_plotly_the_error_says_what_to_install(
    reports: Reports, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None in sys.modules makes `import plotly...` raise ImportError, as on a machine
    # without the report extra.
    for name in [name for name in sys.modules if name.startswith("plotly")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "plotly", None)
    target = tmp_path / "report.html"
    with pytest.raises(UsageError, match=r"pip install 'tiller\[report\]'"):
        write_html_report(reports.after, target)
    assert not target.exists()


def test_importing_the_evals_package_does_not_import_plotly() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tiller.evals; print(sorted(m for m in sys.modules if 'plotly' in m))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"


def test_unfinished_runs_are_badged_and_counted_not_failed(reports: Reports) -> None:
    first, second, *rest = reports.after.results
    cancelled = dataclasses.replace(first, status="cancelled", scores={})
    not_run = dataclasses.replace(second, status="not_run", scores={})
    # 15 runs planned, one never started: the eval was cancelled first.
    report = EvalReport.build("unfinished", 3, 16, [cancelled, not_run, *rest], cancelled=True)
    text = render_html_report(report)
    assert "1 cancelled, 1 not run (budget), 1 not started" in text
    assert "cancelled before it finished" in text
    assert '<tr data-standing="cancelled">' in text and '<tr data-standing="not-run">' in text
    assert f'id="case-{first.case.id}-e{first.epoch}"' in text
    assert "Not scored." in text
