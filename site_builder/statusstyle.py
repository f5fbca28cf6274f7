"""The stylesheet's status rules, generated from the status table (rundir/statuses.py).

templates/static/style.css names no status: where its status rules belong it
holds MARKER, and the build puts there one colour variable per status
(``--st-<code>`` its fill, ``--st-<code>-ink`` its text) and the rules of each
status's role. The heatmap's fills come from the same records
(chartkit.MISSING_FILLS), so a status has one colour on every page. The
output is plain static CSS: no script or preprocessor runs in a reader's browser.
"""

from __future__ import annotations

from pathlib import Path

from rundir.statuses import Status, page_table

MARKER = "/* @status-rules@ */"
STYLESHEET = "style.css"
# The measurements table's Status column (Phase, Context, Requests at once, Status).
STATUS_COLUMN = 4


def _variables(shown: tuple[Status, ...]) -> str:
    lines = [f"  --st-{s.code}: {s.fill}; --st-{s.code}-ink: {s.ink};" for s in shown]
    return ":root {\n" + "\n".join(lines) + "\n}"


def _rules(s: Status) -> list[str]:
    """The CSS rules of one status: its badge, and its table cells by its role."""
    fill, ink = f"var(--st-{s.code})", f"var(--st-{s.code}-ink)"
    edge = f" border-color: {s.edge};" if s.edge else ""
    out = [f".badge.st-{s.code} {{ color: {ink};{edge} background: {fill}; }}"]
    word = f"color: {ink}; font-weight: 600;"
    row = f"table.measurements tr.st-{s.code}"
    if s.role == "flagged":
        out += [f"td.st-{s.code} {{ background: {fill}; }}",
                f"td.st-{s.code} .status {{ {word} }}",
                f"{row} td:nth-child({STATUS_COLUMN}) {{ {word} }}"]
    elif s.role == "failed":
        out += [f"td.st-{s.code} {{ background: {fill}; color: {ink}; }}",
                f"{row} td:nth-child({STATUS_COLUMN}) {{ {word} }}"]
    elif s.role == "absent":
        out += [f"td.st-{s.code} {{ background: {fill}; color: {ink}; }}",
                f".ab td.st-{s.code} .pair {{ color: {ink}; }}",
                f"{row} td {{ color: {ink}; }}"]
    return out


def status_css(traffic: bool = False) -> str:
    """Every status's variables and rules, one block of CSS (the traffic
    statuses' only with `traffic`: rundir/statuses.page_table)."""
    shown = page_table(traffic)
    rules = [rule for s in shown for rule in _rules(s)]
    return "\n".join(["/* Status colours and rules: generated from rundir/statuses.py. */",
                      _variables(shown), *rules])


def stylesheet(text: str, traffic: bool = False) -> str:
    """The site's stylesheet: its source with the status rules in place of MARKER
    (the traffic statuses' too on a site with traffic cells)."""
    if text.count(MARKER) != 1:
        raise ValueError(f"{STYLESHEET}: expected one {MARKER} where the status rules go")
    return text.replace(MARKER, status_css(traffic))


def static_bytes(path: Path, traffic: bool = False) -> bytes:
    """A static file as the site serves it: the stylesheet with its status rules, else as is."""
    data = path.read_bytes()
    if path.name != STYLESHEET:
        return data
    return stylesheet(data.decode("utf-8"), traffic).encode("utf-8")
