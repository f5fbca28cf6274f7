"""What a page costs a reader before its first paint: the HTML and every stylesheet,
script and icon it references, each gzipped on its own (level 9, as a server sends it).

Shared by the index's weight test (tests/site/test_site_index_compare.py) and
benchmarks/page_weight.py, so the test and the report measure the same bytes.
Files a page loads only on demand (table.js's rows file, named by a data-
attribute, never by src/href) are not part of it: they are fetched after a
reader acts.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

_REF = re.compile(r'<(?:link|script)\b[^>]*?\b(?:href|src)="([^"]+)"', re.IGNORECASE)


def gz(data: bytes) -> int:
    """Bytes once gzipped at level 9."""
    return len(gzip.compress(data, 9))


def strip_sections(html: str, ids: tuple[str, ...]) -> str:
    """The page without its top-level <section id=…> blocks named by `ids` (to count a
    part of a page apart from the others; those sections hold no nested section)."""
    for sid in ids:
        m = re.search(rf'<section\b[^>]*\bid="{re.escape(sid)}"', html)
        if m:
            end = html.index("</section>", m.end()) + len("</section>")
            html = html[:m.start()] + html[end:]
    return html


def first_screen(site: Path, rel: str = "index.html", *,
                 without: tuple[str, ...] = ()) -> dict[str, Any]:
    """Raw and gzip bytes of a page and everything it references (link/script), with the
    sections `without` left out of its HTML; per part as [raw, gzip]."""
    page = site / rel
    html = strip_sections(page.read_text("utf-8"), without)
    parts = {rel: html.encode("utf-8")}
    for ref in _REF.findall(html):
        target = (page.parent / ref.split("?")[0]).resolve()
        if target.is_file():
            parts[str(target.relative_to(site.resolve()))] = target.read_bytes()
    return {"raw": sum(len(b) for b in parts.values()), "gzip": sum(gz(b) for b in parts.values()),
            "parts": {k: [len(b), gz(b)] for k, b in parts.items()}}
