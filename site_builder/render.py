"""Jinja2 rendering with every run-supplied value inert.

Autoescape is on for every template; the only markup that reaches a page
unescaped is (a) HTML we build from Markdown with raw HTML disabled and
links sanitised, (b) JSON for <script type="application/json"> with `<`,
`>` and `&` escaped so it can never close its element, and (c) the no-JS
SVG charts that `fallback` draws in Python with every string escaped. Images
in notes become plain links: loading one would be a request to another origin.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import jinja2
from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from rundir import statuses, words
from rundir.slugs import slugify
from site_builder import formats, metrictable, pagerules, runrows, views
from site_builder.glossary import TERM_BY_NAME, TERMS

_SAFE_SCHEMES = ("http://", "https://", "mailto:")


def templates_dir() -> Path:
    """The templates folder: the repository's, or the copy shipped inside the wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "templates", here / "templates"):
        if (candidate / "base.html").is_file():
            return candidate
    raise FileNotFoundError("site templates not found (expected templates/base.html)")


def _validate_link(url: str) -> bool:
    """Allow web, mail and relative links only (no javascript:, data:, file:, vbscript:)."""
    u = url.strip().lower()
    if u.startswith(_SAFE_SCHEMES):
        return True
    scheme = re.match(r"^([a-z][a-z0-9+.-]*):", u)
    return scheme is None  # relative or fragment


_BLOCK_ID = re.compile(r"\{#([a-z][a-z0-9-]*)\}[ \t]*")


def _block_ids(state) -> None:  # type: ignore[no-untyped-def]
    """`{#id}` opening a paragraph gives it (or its list item) that id: anchors without raw HTML.

    Only the project's own documents get this rule; run notes cannot place ids on a page.
    The first use of an id wins; a repeat stays visible text, so the mistake shows.
    """
    taken: set[str] = state.env.setdefault("block_ids", set())
    tokens = state.tokens
    for i, tok in enumerate(tokens):
        if tok.type != "inline" or i == 0 or tokens[i - 1].type != "paragraph_open":
            continue
        m = _BLOCK_ID.match(tok.content)
        if m is None or m.group(1) in taken:
            continue
        taken.add(m.group(1))
        tok.content = tok.content[m.end():]
        owner = tokens[i - 2] if i >= 2 and tokens[i - 2].type == "list_item_open" else tokens[i - 1]
        owner.attrSet("id", m.group(1))


def _heading_ids(prefix: str, shift: int):
    def rule(state) -> None:  # type: ignore[no-untyped-def]
        # A heading never takes an id a `{#id}` anchor placed: it gets the next free suffix.
        seen: dict[str, int] = {i: 1 for i in state.env.get("block_ids", ())}
        tokens = state.tokens
        for i, tok in enumerate(tokens):
            if tok.type in ("heading_open", "heading_close") and shift:
                tok.tag = f"h{min(6, int(tok.tag[1]) + shift)}"
            if tok.type == "heading_open" and i + 1 < len(tokens):
                base = prefix + slugify(tokens[i + 1].content, "section")
                n = seen.get(base, 0)
                seen[base] = n + 1
                tok.attrSet("id", base if not n else f"{base}-{n + 1}")

    return rule


def make_markdown(heading_prefix: str = "", heading_shift: int = 0, *,
                  block_ids: bool = False) -> MarkdownIt:
    """CommonMark (+ tables, strikethrough) with raw HTML off and links sanitised.

    heading_shift moves headings down (notes' `#` becomes <h3> under the page's <h2>);
    block_ids lets the project's documents anchor a paragraph or list item with `{#id}`.
    """
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.validateLink = _validate_link
    if block_ids:
        md.core.ruler.before("inline", "block_ids", _block_ids)
    md.core.ruler.push("heading_ids", _heading_ids(heading_prefix, heading_shift))

    def link_open(self, tokens, idx, options, env):  # type: ignore[no-untyped-def]
        href = tokens[idx].attrGet("href") or ""
        if href.lower().startswith(_SAFE_SCHEMES):
            tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
        return self.renderToken(tokens, idx, options, env)

    def image(self, tokens, idx, options, env):  # type: ignore[no-untyped-def]
        tok = tokens[idx]
        alt = self.renderInlineAsText(tok.children or [], options, env) or "image"
        src = tok.attrGet("src") or ""
        if not src:
            return str(escape(alt))
        return (f'<a href="{escape(src)}" rel="nofollow noopener noreferrer">'
                f"[image: {escape(alt)}]</a>")

    def th_open(self, tokens, idx, options, env):  # type: ignore[no-untyped-def]
        tokens[idx].attrSet("scope", "col")  # a Markdown table's header cells head columns
        return self.renderToken(tokens, idx, options, env)

    md.add_render_rule("link_open", link_open)
    md.add_render_rule("image", image)
    md.add_render_rule("th_open", th_open)
    return md


_NOTES_MD = make_markdown("note-", heading_shift=2)
_DOC_MD = make_markdown("", block_ids=True)


def markdown(text: str | None, *, notes: bool = True) -> Markup:
    """Markdown to safe HTML (run notes get `note-` heading ids so they cannot clash)."""
    if not text:
        return Markup("")
    return Markup((_NOTES_MD if notes else _DOC_MD).render(text))


def json_script(value: Any) -> Markup:
    """JSON safe inside <script type="application/json"> (and as a JS expression)."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, sort_keys=True)
    for a, b in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                 ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(a, b)
    return Markup(text)


def attr_json(value: Any) -> Markup:
    """Compact JSON for a single-quoted attribute (data-levels='[…]'): every character
    that could end the attribute or start markup is a JSON escape."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for a, b in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("'", "\\u0027")):
        text = text.replace(a, b)
    return Markup(text)


def _term_link(name: str, root: str, hover: str | None = None) -> Markup:
    """A glossary link; `hover` replaces the term's own hover text where the
    place shows the figure otherwise (a percentile table: not its median)."""
    term = TERM_BY_NAME.get(name)
    if term is None:
        return escape(name)
    return Markup('<a class="term" href="{}methodology.html#{}" title="{}">{}</a>').format(
        root, term.anchor, hover or term.short, name
    )


class Renderer:
    """Renders the site's templates; one instance per build."""

    def __init__(self, folder: Path | None = None, globals_: dict[str, Any] | None = None) -> None:
        self.folder = Path(folder) if folder else templates_dir()
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(self.folder)),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
        self.env.filters.update(
            tok_s=words.tok_s,
            tok_s_whole=lambda v: words.tok_s(v, whole=True),
            ttft=words.ttft,
            tbt=formats.tbt,
            seconds=formats.seconds,
            count=formats.count,
            average=formats.average,
            ctx=words.context_label,
            pct=formats.percent_change,
            utc=formats.utc_datetime,
            status=words.status_label,
            json_script=json_script,
            attr_json=attr_json,
            markdown=markdown,
        )
        self.env.globals.update(term=_term_link, TERMS=TERMS, MISSING=words.MISSING,
                                NOT_CHECKED=words.NOT_CHECKED,
                                FORMAT_RULES=formats.js_rules(), STATUS_RULES=statuses.js_rules(),
                                METRIC_RULES=metrictable.js_rules(), PAGE_RULES=pagerules.js_rules(),
                                index_record=runrows.index_record)
        # The percentile selector's choices and each figure's texts at every level
        # (site_builder/views.py; templates/_partials/tail_select.html, static/tails.js).
        self.env.globals.update(TAIL_CHOICES=views.TAIL_CHOICES, TAIL_NOTES=views.level_notes(),
                                SAMPLE_NEEDS=views.sample_needs_text(),
                                tail_cell=views.cell_levels, tail_header=views.header_levels,
                                tail_ttft=views.matrix_ttft_levels)
        self.env.globals.update(globals_ or {})

    def keep_compiled(self, cache_dir: Path, fp: str, *, clean: bool = False) -> None:
        """Keep the compiled templates in the build cache (Jinja compiles ~20 templates
        in ~0.4 s a process). Jinja checks each template's source; the folder is named
        by the page fingerprint (the builder's code, hence this environment's options),
        and with `clean` (the build process, not its workers) the folders of other
        fingerprints are removed."""
        folder = Path(cache_dir) / f"jinja-{fp[:24]}"
        try:
            if clean and not folder.is_dir():
                for old in Path(cache_dir).glob("jinja-*"):
                    if old.is_dir() and not old.is_symlink():
                        shutil.rmtree(old, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return  # no cache: compile as before
        self.env.bytecode_cache = jinja2.FileSystemBytecodeCache(str(folder))

    def render(self, template: str, *, depth: int, **context: Any) -> str:
        """Render a page that lives `depth` folders below the site root."""
        root = "../" * depth
        return self.env.get_template(template).render(root=root, **context)

    def fingerprint_files(self) -> list[Path]:
        """Template and static files, for page-cache keys."""
        return sorted(p for p in self.folder.rglob("*") if p.is_file())
