"""FTS5's query language parsed into a tree: what a raw expression (``search --raw``) says.

The grammar is FTS5's own (``fts5parse.y``, SQLite 3.40)::

    expr     := expr OR expr | expr AND expr | expr NOT expr
              | ( expr ) | colset : ( expr ) | cnearset+     (adjacent: an implicit AND)
    cnearset := [colset :] nearset
    nearset  := phrase | ^ phrase | NEAR ( phrase+ [, N] )
    phrase   := STRING [*] (+ STRING [*])*
    colset   := [-] STRING | [-] { STRING+ }

NOT binds tightest, then AND, then OR, each from the left; the implicit AND of
adjacent phrases binds before any of them (``a b NOT c`` is ``(a b) NOT c``). A
STRING is a bareword (letters, digits, ``_``, any non-ASCII character) or a
double-quoted string (``""`` a quote); ``AND``, ``OR`` and ``NOT`` are operators
only in capitals, ``NEAR`` only before ``(``.

The strings are kept as written: the tokenizer of the index cuts them into
terms. :func:`parse` expects an expression FTS5 has accepted (check it with FTS5
first, for FTS5's own messages); anything else raises :class:`InvalidQuery`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mnemex.errors import InvalidQuery
from mnemex.records import dataclass

COLUMNS = frozenset({"content", "tags"})  # the columns of the FTS5 index (memories_fts)

_PUNCTUATION = {
    "(": "(",
    ")": ")",
    "{": "{",
    "}": "}",
    ":": ":",
    ",": ",",
    "+": "+",
    "*": "*",
    "-": "-",
    "^": "^",
}
_SPACE = " \t\n\r"
_OPERATORS = frozenset({"AND", "OR", "NOT"})


@dataclass(frozen=True, slots=True)
class Piece:
    """A STRING of a phrase, and whether its last term is a prefix (``*``)."""

    text: str
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Leaf:
    """A phrase, or a NEAR group of phrases, with its restrictions."""

    phrases: tuple[tuple[Piece, ...], ...]  # each phrase: its strings joined by ``+``
    near: bool = False  # NEAR(...): the phrases within a distance of one another
    initial: bool = False  # ``^``: the phrase starts a column
    columns: frozenset[str] = COLUMNS  # the columns searched


@dataclass(frozen=True, slots=True)
class Node:
    """``AND``, ``OR`` or ``NOT`` (children: what is kept, what is taken away) of
    subexpressions; ``implicit`` for phrases side by side."""

    op: str
    children: tuple[Expr, ...]
    implicit: bool = False


Expr = Leaf | Node


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # STRING, an operator, or a punctuation character; "" at the end
    text: str = ""
    bare: bool = False  # a bareword (not quoted)


def parse(expression: str) -> Expr:
    """The tree of an FTS5 expression."""
    parser = _Parser(_tokens(expression))
    tree = parser.expr()
    if parser.peek().kind:
        parser.fail()
    return tree


def _bareword(char: str) -> bool:
    return not char.isascii() or char.isalnum() or char in "_\x1a"


def _tokens(text: str) -> list[_Token]:
    """The expression's tokens, as FTS5's lexer cuts them."""
    out: list[_Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in _SPACE:
            i += 1
        elif char in _PUNCTUATION:
            out.append(_Token(_PUNCTUATION[char]))
            i += 1
        elif char == '"':
            i, string = _quoted(text, i)
            out.append(_Token("STRING", string))
        elif _bareword(char):
            end = i
            while end < len(text) and _bareword(text[end]):
                end += 1
            word = text[i:end]
            out.append(_Token(word if word in _OPERATORS else "STRING", word, bare=True))
            i = end
        else:
            raise InvalidQuery(f'fts5: syntax error near "{char}"')
    out.append(_Token(""))
    return out


def _quoted(text: str, start: int) -> tuple[int, str]:
    """The end of the string opening at ``start``, and its text (``""`` a quote)."""
    parts, i = [], start + 1
    while True:
        end = text.find('"', i)
        if end < 0:
            raise InvalidQuery("unterminated string")
        parts.append(text[i:end])
        if text.startswith('"', end + 1):
            parts.append('"')
            i = end + 2
        else:
            return end + 1, "".join(parts)


class _Parser:
    """Recursive descent over the tokens, one function per rule of the grammar."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.at + ahead, len(self.tokens) - 1)]

    def take(self, kind: str) -> _Token:
        token = self.peek()
        if token.kind != kind:
            self.fail()
        self.at += 1
        return token

    def fail(self) -> None:
        raise InvalidQuery(f'fts5: syntax error near "{self.peek().text or self.peek().kind}"')

    def expr(self) -> Expr:
        return self._binary("OR", lambda: self._binary("AND", self._not))

    def _not(self) -> Expr:
        return self._binary("NOT", self._primary)

    def _binary(self, op: str, operand: Callable[[], Expr]) -> Expr:
        tree = operand()
        while self.peek().kind == op:
            self.at += 1
            tree = Node(op, (tree, operand()))
        return tree

    def _primary(self) -> Expr:
        if self.peek().kind == "(":
            self.at += 1
            tree = self.expr()
            self.take(")")
            return tree
        if self._colset_ahead():
            start = self.at
            columns = self._colset()
            self.take(":")
            if self.peek().kind == "(":
                self.at += 1
                tree = self.expr()
                self.take(")")
                return _within(tree, columns)
            self.at = start
        leaves = [self._cnearset()]
        while self.peek().kind in ("STRING", "-", "{", "^"):
            leaves.append(self._cnearset())
        return leaves[0] if len(leaves) == 1 else Node("AND", tuple(leaves), implicit=True)

    def _colset_ahead(self) -> bool:
        kind = self.peek().kind
        return kind in ("-", "{") or (kind == "STRING" and self.peek(1).kind == ":")

    def _colset(self) -> frozenset[str]:
        invert = self.peek().kind == "-"
        self.at += invert
        if self.peek().kind == "{":
            self.at += 1
            names = [self.take("STRING").text]
            while self.peek().kind == "STRING":
                names.append(self.take("STRING").text)
            self.take("}")
        else:
            names = [self.take("STRING").text]
        columns = frozenset(n.lower() for n in names)
        unknown = columns - COLUMNS
        if unknown:
            raise InvalidQuery(f"no such column: {min(unknown)}")
        return COLUMNS - columns if invert else columns

    def _cnearset(self) -> Leaf:
        columns = COLUMNS
        if self._colset_ahead():
            columns = self._colset()
            self.take(":")
        return replace(self._nearset(), columns=columns)

    def _nearset(self) -> Leaf:
        token = self.peek()
        if token.kind == "^":
            self.at += 1
            return Leaf((self._phrase(),), initial=True)
        if token.bare and token.text == "NEAR" and self.peek(1).kind == "(":
            self.at += 2
            phrases = [self._phrase()]
            while self.peek().kind == "STRING":
                phrases.append(self._phrase())
            if self.peek().kind == ",":
                self.at += 1
                distance = self.take("STRING")
                if not (distance.bare and distance.text.isascii() and distance.text.isdigit()):
                    raise InvalidQuery(f'expected integer, got "{distance.text}"')
            self.take(")")
            return Leaf(tuple(phrases), near=True)
        return Leaf((self._phrase(),))

    def _phrase(self) -> tuple[Piece, ...]:
        pieces = [self._piece()]
        while self.peek().kind == "+":
            self.at += 1
            pieces.append(self._piece())
        return tuple(pieces)

    def _piece(self) -> Piece:
        text = self.take("STRING").text
        star = self.peek().kind == "*"
        self.at += star
        return Piece(text, star)


def _within(tree: Expr, columns: frozenset[str]) -> Expr:
    """The tree with its phrases restricted to ``columns`` too."""
    if isinstance(tree, Leaf):
        return replace(tree, columns=tree.columns & columns)
    return replace(tree, children=tuple(_within(c, columns) for c in tree.children))


def strings(tree: Expr) -> list[str]:
    """Every STRING of the tree's phrases, in order."""
    if isinstance(tree, Leaf):
        return [piece.text for phrase in tree.phrases for piece in phrase]
    return [text for child in tree.children for text in strings(child)]
