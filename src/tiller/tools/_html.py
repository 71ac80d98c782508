"""`html_to_text`: a web page as the text a model can read.

A model reading a page needs its words and its structure, not its markup: a raw page is
mostly scripts, styles and navigation, and every byte of it costs tokens. This keeps the
title, headings (as `#`, `##`, ...), paragraphs, list items (`- ` or `1. `), quotes
(`> `), preformatted text as it is, table rows (cells joined by ` | `) and links as
`text (url)`, with URLs made absolute against the page's address. Scripts, styles,
navigation, embedded objects, forms' controls and hidden elements are dropped, and
whitespace is collapsed the way a browser collapses it.

It uses the standard library's forgiving `html.parser` (no new dependency) and does not
build a tree: it reacts to tags as they come, so unclosed `<p>` and `<li>`, stray end
tags and other real-world mess cost nothing but a little structure.
"""

from __future__ import annotations

from collections.abc import Callable
from html.parser import HTMLParser
from typing import Final
from urllib.parse import urljoin

__all__ = ["html_to_text"]

#: Elements whose whole content is noise to a reader.
_DROPPED: Final = frozenset(
    {
        "button",
        "canvas",
        "datalist",
        "dialog",
        "iframe",
        "map",
        "math",
        "nav",
        "noscript",
        "object",
        "script",
        "select",
        "style",
        "svg",
        "template",
        "textarea",
    }
)
#: Elements without an end tag (they never open a scope).
_VOID: Final = frozenset(
    {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    }
)
#: Elements that end a line of text without a blank line after it.
_LINE_BLOCKS: Final = frozenset(
    {
        "address",
        "article",
        "aside",
        "body",
        "caption",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "header",
        "hgroup",
        "html",
        "legend",
        "li",
        "main",
        "section",
        "summary",
        "tr",
    }
)
#: Elements set apart by blank lines.
_PARAGRAPH_BLOCKS: Final = frozenset(
    {"blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "ol", "p", "pre", "table", "ul"}
)
_HEADINGS: Final = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
#: Link targets that lead nowhere a reader could follow.
_DEAD_LINKS: Final = ("javascript:", "#", "data:", "vbscript:")


def html_to_text(markup: str, base_url: str = "") -> str:
    """The readable text of the HTML document `markup`.

    `base_url` is the page's address, against which relative links are resolved (a
    `<base href>` in the page takes precedence, as in a browser). Returns the title as a
    first line `Title: ...` when there is one, then the body's text; an empty string for
    a page with no text at all.
    """
    parser = _TextParser(base_url)
    parser.feed(markup)
    parser.close()
    return parser.text()


class _Link:
    """An open `<a>`: its target, where its text starts in the current line, and how many
    lines had gone out when it opened (a link may wrap blocks: a card, a heading)."""

    __slots__ = ("href", "lines", "start")

    def __init__(self, href: str, start: int, lines: int) -> None:
        self.href = href
        self.start = start
        self.lines = lines


class _List:
    """An open `<ul>` or `<ol>`: whether it is numbered, the last number given, and
    whether it is implied by an `<li>` outside any list (the next block ends it)."""

    __slots__ = ("count", "implied", "ordered")

    def __init__(self, ordered: bool, start: int, *, implied: bool = False) -> None:
        self.ordered = ordered
        self.count = start - 1
        self.implied = implied


class _TextParser(HTMLParser):
    """Collects the text of a document as lines, reacting to tags as they come."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self._base = base_url
        self._lines: list[str] = []
        self._inline: list[str] = []
        self._title: list[str] | None = None
        self._title_text = ""
        # Tags opened inside a dropped element, so its end is found despite nesting.
        self._dropped: list[str] = []
        self._lists: list[_List] = []
        self._bullet: str | None = None  # the marker the current list item still owes
        self._heading = 0
        self._quote = 0
        self._pre = 0
        self._pre_text: list[str] = []
        self._links: list[_Link] = []
        self._cells = 0  # cells seen in the current table row

    # ── the output ───────────────────────────────────────────────────────────────

    def text(self) -> str:
        self._flush()
        lines: list[str] = []
        if self._title_text:
            lines += [f"Title: {self._title_text}", ""]
        for line in self._lines:
            if not line and (not lines or not lines[-1]):
                continue  # no leading or doubled blank lines
            lines.append(line)
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)

    def _blank(self) -> None:
        """End the current line and leave a blank one (inside a list, items stay packed)."""
        self._flush()
        if not self._lists and self._lines and self._lines[-1]:
            self._lines.append("")

    def _prefix(self) -> str:
        prefix = "> " * self._quote
        if self._lists:
            depth = len(self._lists)
            if self._bullet is not None:
                prefix += "  " * (depth - 1) + self._bullet
                self._bullet = None
            else:
                prefix += "  " * depth
        if self._heading:
            prefix += "#" * self._heading + " "
        return prefix

    def _flush(self) -> None:
        """End the current line: its collapsed text goes out with the block's prefix."""
        text = " ".join("".join(self._inline).split())
        self._inline.clear()
        for link in self._links:
            link.start = 0  # its text so far went out with this line
        if text:
            self._lines.append(self._prefix() + text)

    # ── tags ─────────────────────────────────────────────────────────────────────

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._dropped:
            if tag not in _VOID:
                self._dropped.append(tag)
            return
        attributes = dict(attrs)
        if tag in _DROPPED or _hidden(attributes):
            if tag not in _VOID:
                self._dropped.append(tag)
            return
        if self._lists and self._lists[-1].implied and tag in _PARAGRAPH_BLOCKS:
            self._flush()
            self._lists.pop()  # an orphan item ends where the next block starts
        if tag == "title":
            self._title = []
        elif tag == "base":
            href = attributes.get("href")
            if href:
                self._base = urljoin(self._base, href.strip())
        elif tag == "pre":
            self._blank()
            self._pre += 1
        elif not self._pre:  # inside <pre>, only the text counts
            start = _STARTS.get(tag)
            if start is not None:
                start(self, tag, attributes)
            else:
                self._block(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._dropped:
            if tag in self._dropped:
                while self._dropped.pop() != tag:
                    pass
            return
        if tag == "title":
            if self._title is not None:
                self._title_text = " ".join("".join(self._title).split())
                self._title = None
        elif tag == "pre":
            if self._pre:
                self._pre -= 1
                if not self._pre:
                    self._end_pre()
        elif not self._pre:
            end = _ENDS.get(tag)
            if end is not None:
                end(self, tag)
            else:
                self._block(tag)

    def _block(self, tag: str) -> None:
        """A block's start or end: a paragraph break, or a line break."""
        if tag in _PARAGRAPH_BLOCKS:
            self._blank()
        elif tag in _LINE_BLOCKS:
            self._flush()

    # ── one tag's start or end (the tables below the class) ───────────────────────

    def _start_list(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._blank()
        self._lists.append(_List(tag == "ol", _start(attributes.get("start"))))

    def _start_item(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._flush()
        if not self._lists:
            self._lists.append(_List(False, 1, implied=True))
        current = self._lists[-1]
        current.count += 1
        self._bullet = f"{current.count}. " if current.ordered else "- "

    def _start_heading(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._blank()
        self._heading = _HEADINGS[tag]

    def _start_quote(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._blank()
        self._quote += 1

    def _start_break(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._flush()

    def _start_rule(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._blank()
        self._lines += ["---", ""]

    def _start_row(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._flush()
        self._cells = 0

    def _start_cell(self, tag: str, attributes: dict[str, str | None]) -> None:
        if self._cells:
            self._inline.append(" | ")
        self._cells += 1

    def _start_link(self, tag: str, attributes: dict[str, str | None]) -> None:
        href = attributes.get("href") or ""
        self._links.append(_Link(href, len(self._inline), len(self._lines)))

    def _start_image(self, tag: str, attributes: dict[str, str | None]) -> None:
        alt = (attributes.get("alt") or "").strip()
        if alt:
            self._inline.append(f" {alt} ")

    def _end_list(self, tag: str) -> None:
        self._flush()
        if self._lists:
            self._lists.pop()
            self._bullet = None
        if not self._lists:
            self._blank()

    def _end_heading(self, tag: str) -> None:
        self._flush()
        self._heading = 0
        self._blank()

    def _end_quote(self, tag: str) -> None:
        self._flush()
        self._quote = max(self._quote - 1, 0)
        self._blank()

    def _end_anchor(self, tag: str) -> None:
        self._end_link()

    def handle_data(self, data: str) -> None:
        if self._dropped:
            return
        if self._title is not None:
            self._title.append(data)
        elif self._pre:
            self._pre_text.append(data)
        else:
            self._inline.append(data)

    # ── pieces ───────────────────────────────────────────────────────────────────

    def _end_link(self) -> None:
        """Turn the link's collected text into `text (url)`."""
        if not self._links:
            return  # a stray </a>
        link = self._links.pop()
        href = link.href.strip()
        if not href or href.lower().startswith(_DEAD_LINKS):
            return
        url = urljoin(self._base, href)
        label = " ".join("".join(self._inline[link.start :]).split())
        if label:
            del self._inline[link.start :]
            self._inline.append(label if label == url else f"{label} ({url})")
            return
        # No text on this line: if the link wrapped whole lines, the URL follows the last
        # of them; an icon-only link gets nothing, since a bare URL would be noise.
        for index in range(len(self._lines) - 1, link.lines - 1, -1):
            if self._lines[index]:
                self._lines[index] += f" ({url})"
                return

    def _end_pre(self) -> None:
        """Emit the preformatted text line by line, indentation kept."""
        text = "".join(self._pre_text).strip("\n")
        self._pre_text.clear()
        quote = "> " * self._quote
        self._lines += [(quote + line).rstrip() for line in text.split("\n")]
        self._blank()


#: What a tag's start does, past `<title>`, `<base>` and `<pre>` (other tags: `_block`).
_STARTS: Final[dict[str, Callable[[_TextParser, str, dict[str, str | None]], None]]] = {
    "ul": _TextParser._start_list,
    "ol": _TextParser._start_list,
    "li": _TextParser._start_item,
    **dict.fromkeys(_HEADINGS, _TextParser._start_heading),
    "blockquote": _TextParser._start_quote,
    "br": _TextParser._start_break,
    "hr": _TextParser._start_rule,
    "tr": _TextParser._start_row,
    "td": _TextParser._start_cell,
    "th": _TextParser._start_cell,
    "a": _TextParser._start_link,
    "img": _TextParser._start_image,
}
#: What a tag's end does, past `</title>` and `</pre>` (other tags: `_block`).
_ENDS: Final[dict[str, Callable[[_TextParser, str], None]]] = {
    "ul": _TextParser._end_list,
    "ol": _TextParser._end_list,
    **dict.fromkeys(_HEADINGS, _TextParser._end_heading),
    "blockquote": _TextParser._end_quote,
    "a": _TextParser._end_anchor,
}


def _hidden(attributes: dict[str, str | None]) -> bool:
    """Whether an element is hidden from readers (`hidden`, `aria-hidden`, `display:none`,
    or a navigation landmark)."""
    if "hidden" in attributes:
        return True
    if (attributes.get("aria-hidden") or "").strip().lower() == "true":
        return True
    if (attributes.get("role") or "").strip().lower() == "navigation":
        return True
    style = "".join((attributes.get("style") or "").lower().split())
    return "display:none" in style


def _start(value: str | None) -> int:
    """The first number of an `<ol start=...>`; 1 when absent or not a number."""
    try:
        return int(value) if value is not None else 1
    except ValueError:
        return 1
