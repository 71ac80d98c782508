"""`html_to_text`: the words and structure of a page, without its markup and noise."""

from __future__ import annotations

from tiller.tools._html import html_to_text

BASE = "https://example.com/docs/page.html"


def test_a_whole_page() -> None:
    page = """<!doctype html>
    <html><head>
      <title>  The   Guide </title>
      <meta charset="utf-8"><link rel="stylesheet" href="x.css">
      <style>body { color: red }</style>
      <script>var html = "<p>not text</p>";</script>
    </head><body>
      <nav><a href="/">Home</a><ul><li>Menu</li></ul></nav>
      <h1>Getting   started</h1>
      <p>Install it with
         <code>pip</code>, then read the <a href="api.html">API reference</a>.</p>
      <h2>Steps</h2>
      <ol><li>Download</li><li>Run <em>it</em></li></ol>
      <ul><li>fast<li>small</ul>
      <p>Questions? <a href="mailto:help@example.com">Mail us</a>.</p>
    </body></html>"""
    assert html_to_text(page, BASE) == (
        "Title: The Guide\n"
        "\n"
        "# Getting started\n"
        "\n"
        "Install it with pip, then read the API reference "
        "(https://example.com/docs/api.html).\n"
        "\n"
        "## Steps\n"
        "\n"
        "1. Download\n"
        "2. Run it\n"
        "\n"
        "- fast\n"
        "- small\n"
        "\n"
        "Questions? Mail us (mailto:help@example.com)."
    )


def test_noise_is_dropped() -> None:
    page = """<body>
      <noscript>enable js</noscript><template><p>tpl</p></template>
      <svg><title>icon</title><text>svg text</text></svg>
      <div hidden>hidden attr</div><div aria-hidden="true">aria</div>
      <div style="color: red; display : none">styled away</div>
      <div role="navigation">crumbs</div>
      <form><label>Name</label><input value="x"><select><option>A</option></select>
      <button>Send</button></form>
      <iframe src="ad.html">frame</iframe>
      <p>kept</p>
    </body>"""
    assert html_to_text(page) == "Name\n\nkept"


def test_nested_drops_end_at_their_own_end_tag() -> None:
    page = "<nav><div><div>a</div></div><p>b</nav><p>after</p>"
    assert html_to_text(page) == "after"


def test_links() -> None:
    page = (
        '<base href="https://cdn.example.org/v2/">'
        '<p><a href="guide">relative to base</a> '
        '<a href="https://x.org/">https://x.org/</a> '
        '<a href="#top">anchor</a> <a href="javascript:go()">script</a> '
        '<a href="/abs"><img src="i.png"></a> <a>no href</a></p>'
    )
    assert html_to_text(page, BASE) == (
        "relative to base (https://cdn.example.org/v2/guide) https://x.org/ anchor script no href"
    )


def test_a_link_wrapping_blocks_puts_its_url_after_them() -> None:
    page = '<a href="/post/1"><h3>Card title</h3><p>The summary.</p></a><p>next</p>'
    assert html_to_text(page, BASE) == (
        "### Card title\n\nThe summary. (https://example.com/post/1)\n\nnext"
    )


def test_nested_lists_quotes_pre_and_tables() -> None:
    page = """
      <ul><li>one<ul><li>inner</li></ul></li><li><p>two</p></li></ul>
      <ol start="7"><li>seven</li></ol>
      <blockquote><p>wise   words</p></blockquote>
      <pre>
def f():
    return  1
</pre>
      <table><tr><th>Name</th><th>Size</th></tr><tr><td>a</td><td>1</td></tr></table>
      <p>line<br>break</p><hr><p>end</p>
    """
    assert html_to_text(page) == (
        "- one\n"
        "  - inner\n"
        "- two\n"
        "\n"
        "7. seven\n"
        "\n"
        "> wise words\n"
        "\n"
        "def f():\n"
        "    return  1\n"
        "\n"
        "Name | Size\n"
        "a | 1\n"
        "\n"
        "line\n"
        "break\n"
        "\n"
        "---\n"
        "\n"
        "end"
    )


def test_entities_and_whitespace() -> None:
    page = "<p>caf&eacute; &amp; cr&#232;me&nbsp;br&ucirc;l&eacute;e \n\t  &lt;tag&gt;</p>"
    assert html_to_text(page) == "café & crème brûlée <tag>"


def test_malformed_markup_still_reads() -> None:
    page = "<p>one<p>two</span></div><li>orphan item<h2>unclosed heading<p>after"
    # An orphan item is a one-item list; a <p> inside an open heading is still heading.
    assert html_to_text(page) == ("one\n\ntwo\n- orphan item\n\n## unclosed heading\n\n## after")


def test_images_show_their_alt_text() -> None:
    assert html_to_text('<p>See <img src="a.png" alt="the chart"> above</p>') == (
        "See the chart above"
    )


def test_an_empty_page() -> None:
    assert html_to_text("") == ""
    assert html_to_text("<html><head><script>x()</script></head><body> </body></html>") == ""
