"""The one slug rule: a name made safe for a folder, a URL and an HTML id.

Both towers make slugs from the same names (model, engine, run id): the
collector and the importer for new run ids, the builder for the site's
`runs/<slug>/` and `models/<slug>.html` and the headings' anchors. One rule
means a run id the collector writes is already its own site slug, so its
permalink reads the same as its folder.

The rule: lower-case; every run of characters other than `a-z 0-9 . _ -`
becomes one `-`; repeated `-` collapse; `-` and `.` are stripped from both
ends (no hidden file, no `..`); a slug longer than 80 characters (max_len)
is cut to make room for `-` and 8 hex digits of the sha1 of the whole text,
so long names stay distinct and stable; nothing left gives `fallback`.
"""

from __future__ import annotations

import hashlib
import re

MAX_LEN = 80
_BAD = re.compile(r"[^a-z0-9._-]+")
_DASHES = re.compile(r"-{2,}")


def slugify(text: str, fallback: str = "run", max_len: int = MAX_LEN) -> str:
    """The slug of text by the rule above (fallback when nothing is left).

    max_len is for the importer alone, whose content-derived ids were cut
    at 120 before the rule was shared and must stay the same."""
    slug = _DASHES.sub("-", _BAD.sub("-", text.lower())).strip("-.")
    if len(slug) > max_len:
        digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
        slug = f"{slug[:max_len - 9].strip('-.')}-{digest}"
    return slug or fallback


def unique_slugs(names: list[str], fallback: str = "run") -> list[str]:
    """Slugs for names, made unique with -2, -3 suffixes in order of appearance."""
    used: set[str] = set()
    out = []
    for name in names:
        base = slugify(name, fallback)
        slug, n = base, 2
        while slug in used:
            slug, n = f"{base}-{n}", n + 1
        used.add(slug)
        out.append(slug)
    return out
