"""Helpers for the page tests: a minimal HTML tree for structure tests, and
Playwright with Debian's Chromium (never a downloaded browser) for browser tests.

`parse_html()` turns a page into `Node`s with `find_all`/`text` for exact
cell-by-cell checks. `launch()` starts /usr/bin/chromium headless with no background traffic;
`Watcher` records everything a page should never do: console errors or
warnings, uncaught exceptions, dialogs, failed or 4xx/5xx responses, and
any request that leaves the site's own origin (those are aborted).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """Debian's Chromium if installed (never a Playwright-downloaded browser)."""
    if Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    return None


def require_chromium() -> str:
    """The Chromium path; fail under CI when it is missing, skip otherwise."""
    path = chromium_path()
    if path is None:
        message = f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the playwright package is not installed")
        pytest.skip("the playwright package is not installed")
    return path


def launch(playwright: Any) -> Any:
    """A headless Chromium browser from the system install."""
    return playwright.chromium.launch(executable_path=require_chromium(), args=ARGS,
                                      headless=True)


@dataclass
class Watcher:
    """Collects what a page must not do; `problems()` lists them as lines."""

    site_root: str  # file:///…/site/ or http://127.0.0.1:port/
    console: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    bad_responses: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def own(self, url: str) -> bool:
        if url.startswith(("data:", "blob:", "about:")):
            return True
        if self.site_root.startswith("file:"):
            return url.startswith(self.site_root)
        a, b = urlsplit(url), urlsplit(self.site_root)
        return (a.scheme, a.netloc) == (b.scheme, b.netloc)

    def attach(self, context: Any) -> None:
        """Route every request of the context through the origin check."""

        def route(r: Any) -> None:
            url = r.request.url
            if self.own(url):
                r.continue_()
            else:
                self.foreign.append(url)
                r.abort()

        context.route("**/*", route)

    def watch(self, page: Any) -> Any:
        def on_console(msg: Any) -> None:
            if msg.type in ("error", "warning"):
                self.console.append(f"{msg.type}: {msg.text} ({page.url})")

        def on_dialog(d: Any) -> None:
            self.dialogs.append(f"{d.type}: {d.message}")
            d.dismiss()

        def on_response(resp: Any) -> None:
            if resp.status >= 400:
                self.bad_responses.append(f"{resp.status} {resp.url}")

        page.on("console", on_console)
        page.on("pageerror", lambda exc: self.errors.append(f"{exc} ({page.url})"))
        page.on("dialog", on_dialog)
        page.on("response", on_response)
        def on_failed(req: Any) -> None:
            # ERR_ABORTED: a load cut short by the next navigation, not a broken link.
            if self.own(req.url) and "ERR_ABORTED" not in (req.failure or ""):
                self.failed.append(f"{req.url}: {req.failure}")

        page.on("requestfailed", on_failed)
        return page

    def problems(self) -> list[str]:
        return (self.console + self.errors + [f"dialog {d}" for d in self.dialogs]
                + [f"foreign request {u}" for u in self.foreign] + self.bad_responses
                + [f"failed {u}" for u in self.failed])


def site_pages(site: Path) -> list[str]:
    """Every HTML page of a built site, relative to its root (skipping the build cache)."""
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                  if ".cache" not in p.parts)


def wait_for_charts(page: Any, timeout_ms: int = 15_000) -> int:
    """Wait until every chart on the page has been drawn by vega-embed; return the count."""
    n = page.locator("figure.chart").count()
    if n:
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('figure.chart'))"
            ".every(f => f.classList.contains('is-live'))",
            timeout=timeout_ms,
        )
    return n


# --------------------------------------------------------------------------
# a minimal HTML tree
# --------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        """textContent, like a browser's (no separators between elements)."""
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self) -> Any:
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None,
                 **attrs: str) -> list[Node]:
        out = []
        for n in self.iter():
            if tag and n.tag != tag:
                continue
            if cls and cls not in n.attrs.get("class", "").split():
                continue
            if any(n.attrs.get(k) != v for k, v in attrs.items()):
                continue
            out.append(n)
        return out

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}>"
        return found[0]

    def rows(self) -> list[list[str]]:
        """Cell texts of every <tr> below this node (th and td alike)."""
        return [[" ".join(c.text().split()) for c in tr.children
                 if isinstance(c, Node) and c.tag in ("td", "th")]
                for tr in self.find_all("tr")]


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_html(html: str) -> Node:
    """Parse a page into a Node tree (the document root)."""
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root
