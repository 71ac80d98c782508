"""bash's grammar's reading of a command line (tree-sitter-bash): what the shell risk
classifier must not be unsure of.

tree-sitter-bash is a maintained, error-tolerant bash grammar (arrays, here-docs,
process substitution, `[[ ]]`, functions) whose parse marks what it cannot read with
ERROR and MISSING nodes, which bashlex does not offer (it raises on the first fault,
and does not cover arrays, here-docs or process substitution). `read_tree(source)`
parses once and reports two things the classifier treats as uncertain:

- `error`: where the grammar could not read the text (an ERROR or MISSING node), so
  what bash would run is not known for sure;
- `computed`: every command name the parse shows is computed when the command runs (a
  command or process substitution, `${...}` with an operator or a subscript,
  `$((...))`, a concatenation holding any of them) — in any simple command of the
  line, however deeply nested in lists, pipelines, subshells, functions or
  substitutions.

The word-level reading (quotes, escapes, ANSI-C strings, brace expansion, variables
assigned earlier) stays with `_shell_syntax`; this is the second, independent reading
that a lexer's blind spot cannot hide a computed program from. The grammar is loaded
once per process and a parser kept per thread (a parser is not shared between threads).

Characters outside the Basic Multilingual Plane (4 bytes in UTF-8: emoji, rare scripts)
corrupt the memory of tree-sitter's bash lexer (0.23-0.26 with tree-sitter-bash 0.23-0.25:
a few thousand such lines kill the process with SIGSEGV), so a hostile model could crash
tiller with the commands it writes. The grammar is given the text with each of them replaced by
four ASCII `x`: a word character to bash, as they are, and the same four bytes, so every
node's offsets still index the real text, which is what the classifier reads.
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass
from typing import Final

import tree_sitter
import tree_sitter_bash

__all__ = ["Parsed", "TreeReading", "parse_tree", "read_tree"]

#: Characters of four UTF-8 bytes, which the grammar is not given (module docstring).
_ASTRAL: Final = re.compile("[\U00010000-\U0010ffff]")

#: Nodes that make a command name known only when the command runs.
_COMPUTING: Final = frozenset(
    {"command_substitution", "process_substitution", "arithmetic_expansion", "expansion"}
)
_EXCERPT: Final = 60
_local = threading.local()


@dataclass(frozen=True, slots=True)
class TreeReading:
    """What the grammar saw: `error` says where it could not read the text (or `None`);
    `computed` holds the command names computed when the command runs, as written."""

    error: str | None
    computed: tuple[str, ...]


@functools.cache
def _language() -> tree_sitter.Language:
    return tree_sitter.Language(tree_sitter_bash.language())


def _parser() -> tree_sitter.Parser:
    parser: tree_sitter.Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = tree_sitter.Parser(_language())
        _local.parser = parser
    return parser


def _text(source: bytes, node: tree_sitter.Node) -> str:
    text = source[node.start_byte : node.end_byte].decode("utf-8", "replace")
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 3] + "..."


def _bare_variable(node: tree_sitter.Node) -> bool:
    """`$NAME`, `${NAME}`, `"$NAME"`: a variable the classifier may know a literal for."""
    named = node.named_children
    if node.type == "string" and len(named) == 1:
        return _bare_variable(named[0])
    if node.type == "simple_expansion":
        return True
    return node.type == "expansion" and [n.type for n in named] == ["variable_name"]


def _computes(name: tree_sitter.Node) -> bool:
    """Whether a command name holds something bash computes when it runs."""
    if len(name.named_children) == 1 and _bare_variable(name.named_children[0]):
        return False
    stack = [name]
    while stack:
        current = stack.pop()
        if current.type in _COMPUTING or current.type == "simple_expansion":
            return True
        stack.extend(current.children)
    return False


@dataclass(frozen=True, slots=True)
class Parsed:
    """A parse: the text as the bytes the tree's offsets count, and the tree."""

    data: bytes
    tree: tree_sitter.Tree

    def text(self, node: tree_sitter.Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")


def parse_tree(source: str) -> Parsed:
    """`source` parsed as bash (once; the caller keeps it for every reading)."""
    data = source.encode("utf-8", "surrogatepass")
    if source.isascii() or not _ASTRAL.search(source):
        return Parsed(data, _parser().parse(data))
    # Same length in bytes, so the tree's offsets index `data` (module docstring).
    stand_in = _ASTRAL.sub("xxxx", source).encode("utf-8", "surrogatepass")
    return Parsed(data, _parser().parse(stand_in))


def read_tree(source: str | Parsed) -> TreeReading:
    """Report what the classifier must treat as uncertain in `source` (text, or its
    parse; see the module docstring). Never raises."""
    parsed = parse_tree(source) if isinstance(source, str) else source
    data, tree = parsed.data, parsed.tree
    error: str | None = None
    computed: list[str] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if error is None and (node.is_error or node.is_missing):
            what = f"`{node.type}` is missing" if node.is_missing else "it cannot be read"
            error = f"bash's grammar stops at `{_text(data, node) or node.type}`: {what}"
        if node.type == "command_name" and _computes(node):
            computed.append(_text(data, node))
        if node.has_error or node.child_count:
            stack.extend(reversed(node.children))
    return TreeReading(error, tuple(computed))
