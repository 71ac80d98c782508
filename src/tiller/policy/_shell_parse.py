"""A command line's structure from bash's grammar (tree-sitter-bash, see `_shell_tree`):
the simple commands bash would run, as `_shell_syntax.Script`.

`parse_script(source)` takes the commands, pipelines, lists, background jobs,
subshells, groups, function bodies, compound keywords, assignments and redirections
from the parse tree; each word's text (a node of the tree) is then read the way bash
reads it before running it by `_shell_lexer`'s word reader (quotes, escapes, `$'...'`,
brace expansion, the substitutions inside it). Two places where tree-sitter-bash hangs
a construct on the wrong node are put back the way bash runs them: a here-doc
redirection carries the rest of its pipeline or list (`cat <<EOF | sh`), and a
redirection after a list applies to it as a whole (`a && b > out`, kept conservative).

Where the tree has an ERROR or MISSING node (the text is broken, or valid bash the
grammar misreads: `{rm,-rf,/}` as a command, `((rm -rf /) )`, `cat <<EOF; ls`), the
hand reader (`_shell_syntax.parse_script`) reads the text instead, and the classifier
marks the command uncertain (`_shell_tree.read_tree` reports the error).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

import tree_sitter

from ._shell_lexer import HereDoc, Lexer, Redirect, ShellSyntaxError, Word
from ._shell_syntax import Command, Script
from ._shell_syntax import parse_script as parse_by_hand
from ._shell_tree import Parsed

__all__ = ["parse_script"]

_LOOSE_FIELDS: Final = frozenset({"value", "variable", "name"})
_SKIPPED: Final = frozenset({"comment", "heredoc_body", "heredoc_end", "heredoc_start"})
_LOOPS: Final = frozenset({"for_statement", "c_style_for_statement", "while_statement"})
_BLOCKS: Final = frozenset(
    {
        "if_statement", "elif_clause", "else_clause", "while_statement", "for_statement",
        "c_style_for_statement", "case_statement", "case_item", "do_group",
        "compound_statement", "negated_command",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Where:
    """Where a statement sits: the function bodies and subshells around it."""

    functions: tuple[str, ...] = ()
    subshells: tuple[int, ...] = ()
    repeats: bool = False


class _Builder:
    def __init__(self, script: Script, parsed: Parsed, depth: int) -> None:
        self.script = script
        self.parsed = parsed
        self.depth = depth
        self.pipeline = 0
        self.subshells = 0

    def text(self, node: tree_sitter.Node) -> str:
        return self.parsed.text(node)

    def word(self, node: tree_sitter.Node) -> Word:
        raw = self.text(node)
        lexer = Lexer(raw, 0, self.depth)
        try:
            return lexer._read_word()
        except (ShellSyntaxError, RecursionError) as error:
            # A word the reader cannot take apart: what it runs is unknown, so the
            # classifier fails closed on the script.
            self.script.error = self.script.error or f"cannot read the word `{raw[:40]}` ({error})"
            return Word(raw, raw, dynamic=True)

    # ── statements ──────────────────────────────────────────────────────────────

    def statements(self, nodes: list[tree_sitter.Node], where: _Where) -> None:
        """A sequence of statements (a program, a group's body): each its own
        pipeline; a `&` after one sends all of its commands to the background."""
        count = 0
        for node in nodes:
            if node.type == "&":
                self.script.compound = True
                continue
            if not node.is_named or node.type in _SKIPPED:
                continue
            count += 1
            start = len(self.script.commands)
            self.pipeline += 1
            self.statement(node, where)
            following = node.next_sibling
            if following is not None and following.type == "&":
                for command in self.script.commands[start:]:
                    command.background = True
        if count > 1:
            self.script.compound = True

    def statement(self, node: tree_sitter.Node, where: _Where) -> None:
        kind = node.type
        if kind == "command":
            self.command(node, where)
        elif kind in ("variable_assignment", "variable_assignments"):
            assignments = node.named_children if kind == "variable_assignments" else [node]
            command = self.new(node, where)
            command.assignments = [self.word(a) for a in assignments]
        elif kind in ("declaration_command", "unset_command"):
            command = self.new(node, where)
            command.words = [self.word(child) for child in node.children if child.type != "comment"]
        elif kind == "test_command":
            self.script.compound = True
            command = self.new(node, where)
            command.kind = "test"
            subs = Lexer(self.text(node), 0, self.depth).scan_expansions()
            command.words = [Word("[[", "[[", substitutions=tuple(subs))]
        elif kind == "redirected_statement":
            self.redirected(node, where)
        elif kind == "pipeline":
            self.pipe(node.named_children, where)
        elif kind == "list":
            self.script.compound = True
            for child in node.named_children:
                self.pipeline += 1
                self.statement(child, where)
        elif kind == "subshell":
            self.script.compound = True
            self.subshells += 1
            inner = replace(where, subshells=(*where.subshells, self.subshells))
            self.statements(node.children, inner)
        elif kind == "function_definition":
            self.function(node, where)
        elif kind == "compound_statement" and node.children[:1] and node.children[0].type == "((":
            self.arithmetic(node, where)
        elif kind in _LOOPS:
            self.script.compound = True
            self.block(node, replace(where, repeats=True))
        elif kind in _BLOCKS or kind not in _SKIPPED:
            self.script.compound = True
            self.block(node, where)

    def function(self, node: tree_sitter.Node, where: _Where) -> None:
        """A function definition: its name a loose word, its body statements inside it."""
        self.script.compound = True
        name = node.child_by_field_name("name")
        body = node.child_by_field_name("body")
        label = self.text(name) if name is not None else ""
        if name is not None:
            self.script.loose.append(self.word(name))
        if body is not None:
            self.statement(body, replace(where, functions=(*where.functions, label)))

    def arithmetic(self, node: tree_sitter.Node, where: _Where) -> None:
        """`(( ... ))`: a command of its own, whose expansions still run."""
        self.script.compound = True
        command = self.new(node, where)
        command.kind = "arith"
        arith = self.text(node)[2:-2]
        subs = Lexer(arith, 0, self.depth).scan_expansions()
        command.words = [Word(self.text(node), arith, dynamic=True, substitutions=tuple(subs))]

    def block(self, node: tree_sitter.Node, where: _Where) -> None:
        """A compound command: its statements in order, its header words (a `for`
        list, a `case` subject and patterns) as loose words."""
        statements: list[tree_sitter.Node] = []
        for index, child in enumerate(node.children):
            field = node.field_name_for_child(index)
            if field in _LOOSE_FIELDS and child.type != "variable_name":
                self.script.loose.append(self.word(child))
            elif field == "condition" or (child.is_named and field not in _LOOSE_FIELDS):
                if child.type in ("variable_name",):
                    continue
                statements.append(child)
            elif child.type == "&":
                statements.append(child)
        self.statements(statements, where)

    def pipe(self, stages: list[tree_sitter.Node], where: _Where) -> None:
        self.script.compound = True
        pipeline = self.pipeline
        last = len(stages) - 1
        for stage, node in enumerate(stages):
            start = len(self.script.commands)
            self.statement(node, where)
            self.pipeline = pipeline
            for command in self.script.commands[start:]:
                command.pipeline, command.stage = pipeline, stage
                command.piped_out = command.piped_out or stage < last

    def redirected(self, node: tree_sitter.Node, where: _Where) -> None:
        body = node.child_by_field_name("body")
        redirects = [
            child for index, child in enumerate(node.children)
            if node.field_name_for_child(index) == "redirect"
        ]  # fmt: skip
        start = len(self.script.commands)
        if body is not None and body.type == "command":
            command = self.command(body, where)
        else:
            if body is not None:
                self.statement(body, where)
            self.script.compound = True
            command = self.new(node, where)
        for redirect in redirects:
            rest = self.redirect(redirect, command)
            if rest is not None:
                self.continuation(rest, start, where)
        if command.text == self.text(body or node).strip():
            command.text = self.text(node).split("\n", 1)[0].strip()

    def continuation(self, rest: list[tree_sitter.Node], start: int, where: _Where) -> None:
        """What tree-sitter-bash hangs on a here-doc redirection: `| sh` joins the
        pipeline of the commands before it, `&& cmd` is a new one."""
        self.script.compound = True
        for node in rest:
            if node.type == "pipeline":
                stages = node.named_children
                pipeline = self.pipeline
                for command in self.script.commands[start:]:
                    command.piped_out = True
                for offset, stage_node in enumerate(stages, start=1):
                    first = len(self.script.commands)
                    self.statement(stage_node, where)
                    for command in self.script.commands[first:]:
                        command.pipeline, command.stage = pipeline, offset
                        command.piped_out = offset < len(stages)
                self.pipeline = pipeline
            elif node.is_named:
                self.pipeline += 1
                self.statement(node, where)

    # ── commands ────────────────────────────────────────────────────────────────

    def new(self, node: tree_sitter.Node, where: _Where) -> Command:
        command = Command(
            self.text(node).strip(),
            pipeline=self.pipeline,
            functions=where.functions,
            subshells=where.subshells,
            repeats=where.repeats,
        )
        self.script.commands.append(command)
        return command

    def command(self, node: tree_sitter.Node, where: _Where) -> Command:
        command = self.new(node, where)
        for index, child in enumerate(node.children):
            field = node.field_name_for_child(index)
            if child.type == "variable_assignment":
                command.assignments.append(self.word(child))
            elif child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                self.redirect(child, command)
            elif child.type == "command_name" or field == "argument":
                command.words.append(self.word(child))
        return command

    def redirect(self, node: tree_sitter.Node, command: Command) -> list[tree_sitter.Node] | None:
        """Add `node`'s redirection to `command`; returns what a here-doc redirection
        carries after it (the rest of the pipeline or list), if anything."""
        fd: str | None = None
        op = ""
        targets: list[tree_sitter.Node] = []
        for index, child in enumerate(node.children):
            field = node.field_name_for_child(index)
            if field == "descriptor" or child.type == "file_descriptor":
                fd = self.text(child)
            elif not child.is_named and not op:
                op = child.type
            elif child.is_named and child.type not in ("heredoc_start", "heredoc_body"):
                targets.append(child)
        if node.type == "heredoc_redirect":
            start = next((c for c in node.children if c.type == "heredoc_start"), None)
            body = next((c for c in node.children if c.type == "heredoc_body"), None)
            delimiter = self.word(start) if start is not None else Word("", "")
            heredoc = HereDoc(delimiter.value, op == "<<-", expands=not delimiter.quoted)
            heredoc.body = self.text(body).removesuffix("\n") if body is not None else ""
            if heredoc.expands:
                subs = Lexer(heredoc.body, 0, self.depth).scan_expansions()
                heredoc.substitutions = tuple(subs)
            command.redirects.append(Redirect(op or "<<", delimiter, fd, heredoc))
            rest = [t for t in targets if t.type != "heredoc_end"]
            return rest or None
        if not targets:
            return None
        command.redirects.append(Redirect(op, self.word(targets[0]), fd))
        command.words.extend(self.word(extra) for extra in targets[1:])
        return None


def parse_script(source: str, parsed: Parsed, depth: int = 0) -> Script:
    """Read `source` as bash from its parse tree `parsed` (see the module docstring);
    text the grammar cannot read is read by hand. Never raises."""
    root = parsed.tree.root_node
    if root.has_error:
        return parse_by_hand(source, depth)
    script = Script(source)
    builder = _Builder(script, parsed, depth)
    try:
        builder.statements(root.children, _Where())
    except RecursionError:
        return parse_by_hand(source, depth)
    return script
