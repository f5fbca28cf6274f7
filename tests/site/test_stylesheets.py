"""Every stylesheet the site ships parses as the CSS its author meant (issue 30, item 12).

A lost `}` in templates/static/style.css left the phone-width `@media` block
open, so every rule after it (the run lists' colour swatches among them)
applied only below 640 px; browsers close an open block at the end of the
file without a word, so nothing failed. This test reads each stylesheet with
a small CSS tokenizer (comments, strings, url(), escapes; CSS Syntax Level 3's
blocks) and parses it into rules: every block closed where it was opened, no
stray closer, each style rule a block of `property: value` declarations (the
site does not use CSS nesting, so a rule inside a rule is a missing `}`), and
at-rules only at the top level, never left open. No CSS package is a
dependency of the project, hence the tokenizer here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

STATIC = Path(__file__).resolve().parents[2] / "templates" / "static"
SHEETS = sorted(STATIC.glob("*.css"))
CLOSERS = {"{": "}", "(": ")", "[": "]"}
# At-rules whose block holds rules (the rest hold declarations, or have no block).
RULE_BLOCKS = {"media", "supports", "layer", "container", "document"}


class CssError(ValueError):
    """Where and why a stylesheet does not parse: line and message."""


@dataclass
class Rule:
    """A parsed rule: its prelude (selector or at-rule), its declarations or rules."""

    prelude: str
    line: int
    declarations: list[tuple[str, str]] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)


def tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, line) tokens: "{", "}" and ";" (outside brackets) as themselves,
    "text" for what lies between (strings and brackets kept, comments dropped);
    CssError on an unclosed comment or string, or a bracket closed by the wrong
    closer or never."""
    out: list[tuple[str, str, int]] = []
    stack: list[tuple[str, int]] = []
    i, line, buf = 0, 1, ""

    def flush() -> None:
        nonlocal buf
        if buf.strip():
            out.append(("text", buf.strip(), line))
        buf = ""

    while i < len(text):
        c = text[i]
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise CssError(f"line {line}: a comment is never closed")
            line += text.count("\n", i, end)
            i = end + 2
            buf += " "
            continue
        if c in "\"'":
            j = i + 1
            while j < len(text) and text[j] != c:
                if text[j] == "\n":
                    raise CssError(f"line {line}: a string runs past the end of its line")
                j += 2 if text[j] == "\\" else 1
            if j >= len(text):
                raise CssError(f"line {line}: a string is never closed")
            buf += text[i:j + 1]
            i = j + 1
            continue
        if c == "\\":  # an escape: the next character is plain text
            buf += text[i:i + 2]
            i += 2
            continue
        if c == "\n":
            line += 1
        in_brackets = bool(stack) and stack[-1][0] in "(["
        if c in "{([":
            if c == "{":
                flush()
                out.append((c, c, line))
            else:
                buf += c
            stack.append((c, line))
        elif c in "})]":
            if not stack:
                raise CssError(f"line {line}: {c!r} closes nothing")
            opener, at = stack.pop()
            if CLOSERS[opener] != c:
                raise CssError(f"line {line}: {c!r} closes {opener!r} of line {at}")
            if c == "}":
                flush()
                out.append((c, c, line))
            else:
                buf += c
        elif c == ";" and not in_brackets:
            flush()
            out.append((c, c, line))
        else:
            buf += c
        i += 1
    flush()
    if stack:
        opener, at = stack[-1]
        raise CssError(f"line {at}: {opener!r} is never closed (the file ends inside it)")
    return out


def _text(toks: list[tuple[str, str, int]]) -> str:
    return " ".join(" ".join(t.split()) for _, t, _ in toks)


def _until(toks: list[tuple[str, str, int]], i: int, stops: str) -> int:
    """The index of the first token of a kind in `stops` from i (len(toks): none)."""
    while i < len(toks) and toks[i][0] not in stops:
        i += 1
    return i


def _declarations(toks: list[tuple[str, str, int]], rule: Rule) -> None:
    """`property: value;` items of a style rule's block; CssError on a nested block."""
    i = 0
    while i < len(toks):
        end = _until(toks, i, ";{")
        if end < len(toks) and toks[end][0] == "{":
            raise CssError(f"line {toks[end][2]}: a block inside the rule {rule.prelude!r} of "
                           f"line {rule.line} (a '}}' missing before it?)")
        part = _text(toks[i:end])
        if part:
            name, colon, value = part.partition(":")
            if not colon or not name.strip() or not value.strip() or " " in name.strip():
                raise CssError(f"line {toks[i][2]}: {part!r} is not a declaration "
                               f"(property: value) in {rule.prelude!r}")
            rule.declarations.append((name.strip(), value.strip()))
        i = end + 1


def _rules(toks: list[tuple[str, str, int]], top: bool) -> list[Rule]:
    """Rules from a token list (a stylesheet, or an at-rule's block of rules)."""
    out: list[Rule] = []
    i = 0
    while i < len(toks):
        head = _until(toks, i, "{;}")
        prelude = _text(toks[i:head])
        line = toks[i][2]
        if head >= len(toks) or toks[head][0] in ";}":
            if prelude.startswith("@") and head < len(toks) and toks[head][0] == ";":
                out.append(Rule(prelude, line))  # @import, @charset: no block
                i = head + 1
                continue
            raise CssError(f"line {line}: {prelude!r} has no block")
        # the block's tokens, up to its own closer
        depth, j = 1, head + 1
        while depth:
            depth += toks[j][0] == "{"
            depth -= toks[j][0] == "}"
            j += 1
        body = toks[head + 1:j - 1]
        rule = Rule(prelude, line)
        if not prelude:
            raise CssError(f"line {line}: a block with no selector")
        name = prelude[1:].split()[0].lower() if prelude.startswith("@") else ""
        if name in RULE_BLOCKS:
            if not top:
                raise CssError(f"line {line}: {prelude!r} inside another block "
                               "(a '}' missing before it?)")
            rule.rules = _rules(body, top=False)
        else:
            _declarations(body, rule)
        out.append(rule)
        i = j
    return out


def parse(text: str) -> list[Rule]:
    """A stylesheet's rules; CssError naming the line where it goes wrong."""
    return _rules(tokens(text), top=True)


def test_the_site_ships_stylesheets() -> None:
    assert [p.name for p in SHEETS] == ["style.css"]


@pytest.mark.parametrize("sheet", SHEETS, ids=lambda p: p.name)
def test_every_stylesheet_parses(sheet: Path) -> None:
    rules = parse(sheet.read_text("utf-8"))
    assert rules
    # every style rule holds declarations; every @media block holds style rules
    assert all(r.declarations or r.rules for r in rules), [r.prelude for r in rules
                                                          if not (r.declarations or r.rules)]


def test_the_run_list_swatches_are_styled_at_every_width() -> None:
    """The swatch rule is top-level, not inside a width's @media block (the bug's effect)."""
    rules = parse((STATIC / "style.css").read_text("utf-8"))
    top = {r.prelude for r in rules if not r.prelude.startswith("@")}
    assert ".chart-legend .swatch" in top


@pytest.mark.parametrize("broken, why", [
    ("@media (max-width: 640px) {\n  a { color: red; }\n\n.x { width: 1rem; }\n",
     "never closed"),
    ("a { color: red; }\n}\n", "closes nothing"),
    ("a { color: red;\nb { color: blue; }\n", "never closed"),
    ("@media (max-width: 640px) {\n  a { color: red; }\n.x { width: 1rem; }\n}\n"
     "@media print { b { color: blue; } }\n@media screen { c { x: y; }\n", "never closed"),
    ("a { color: red; b { color: blue; } }\n", "a block inside the rule"),
    ("a { color red; }\n", "not a declaration"),
    ("a { content: \"}\n; }\n", "runs past the end of its line"),
    ("/* open\na { color: red; }\n", "comment is never closed"),
    ("a { width: calc(1px + 2px; }\n", "closes '('"),
])
def test_a_broken_stylesheet_is_named_with_its_line(broken: str, why: str) -> None:
    with pytest.raises(CssError, match=re.escape(why)):
        parse(broken)


def test_braces_in_comments_strings_and_escapes_are_text() -> None:
    rules = parse('/* { */ a::before { content: "}{" ; } b { content: \'\\}\'; }\n'
                  '.c\\{ { background: url(x.svg); }')
    assert [r.prelude for r in rules] == ["a::before", "b", ".c\\{"]
    assert rules[0].declarations == [("content", '"}{"')]
