"""The words on the page have one source (issue 11, item 1).

* The compare page's script writes a change between two runs exactly as
  formats.percent_change does (checked in Chromium on a set of values), and
  its other texts are the build's.
* Every glossary entry is the definition docs/methodology.md gives.
* The builder ships its methodology: `build-site` run in another project's
  folder never publishes that project's docs/methodology.md.
* The collector's live display uses the published status words and formats.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from bench.core.plan import Cell, make_plan
from bench.run.progress import Progress
from rundir import contract, words
from site_builder import formats
from site_builder.glossary import TERMS, body_without_glossary, definitions, methodology_path
from site_builder.publish import build_site, methodology_text
from site_builder.render import markdown
from tests.conftest import REPO
from tests.support.chromium import Watcher, parse_html
from tests.support.synthetic_runs import make_imported_run

# (A, B) total tok/s pairs: half-way cases, binary noise, sign, zero, separators.
PAIRS = [(100.0, 112.25), (100.0, 112.35), (3.0, 2.99985), (1.0, 150.5), (7.0, 7.0000001),
         (100.0, 99.95), (0.3, 0.6), (1000.0, 1000.45), (0.001, 1_000_000.0), (200.0, 0.0),
         (0.0, 5.0), (6216.04, 17_649.9), (12.0, 11.994), (1.0, 1.0)]
DOC = methodology_path().read_text(encoding="utf-8")


def _decode(conc: int, tok: float) -> dict[str, Any]:
    return {"phase": contract.DECODE, "context": 8192, "concurrency": conc, "status": contract.VALID,
            "total_tok_s": tok}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("words")
    for run_id, side in (("wa", 0), ("wb", 1)):
        make_imported_run(root / "data" / run_id, run_id=run_id,
                          cells=[_decode(i + 1, pair[side]) for i, pair in enumerate(PAIRS)],
                          info={"model": {"name": "Words-Model"}})
    report = build_site(root / "data", root / "site")
    assert report.errors == []
    return root / "site"


def _slugs(site: Path) -> dict[str, str]:
    index = json.loads((site / "index.json").read_text(encoding="utf-8"))
    runs = index["runs"] if isinstance(index, dict) else index
    return {r["run_id"]: r["slug"] for r in runs}


@pytest.mark.browser
def test_the_compare_script_formats_a_change_exactly_as_python(browser: Any, site: Path) -> None:
    slugs = _slugs(site)
    root = site.resolve().as_uri() + "/"
    context = browser.new_context()
    watcher = Watcher(root)
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    page.goto(f"{root}compare.html#a={slugs['wa']}&b={slugs['wb']}&m=total_tok_s",
              wait_until="load")
    page.wait_for_selector("table.ab tbody tr")
    cells = page.eval_on_selector(
        "table.ab", "t => Array.from(t.tBodies[0].rows[0].cells).slice(1).map(td => "
        "Array.from(td.querySelectorAll('.delta, .pair')).map(e => e.textContent))")
    context.close()
    assert watcher.problems() == []
    want = [[formats.percent_change(b, a), f"A {words.tok_s(a)}", f"B {words.tok_s(b)}"]
            for a, b in PAIRS]
    assert cells == want
    # the cases the set is for really occur
    texts = {w[0] for w in want}
    assert {"+12.3%", "+12.4%", "−0.1%", "0.0%", words.MISSING, "−100.0%"} <= texts
    assert any("," in t for t in texts)


def test_the_page_carries_the_rules_of_percent_change(site: Path) -> None:
    doc = parse_html((site / "compare.html").read_text(encoding="utf-8"))
    rules = json.loads(doc.find("script", id="ab-rules").text())
    assert rules == formats.js_rules()
    js = (site / "static").glob("compare*.js")
    source = "".join(p.read_text(encoding="utf-8") for p in js)
    assert "\\u2212" not in source and "1e-9" not in source and '"0.0%"' not in source


def test_every_glossary_entry_is_the_methodology_s_definition() -> None:
    found = definitions(DOC)
    for term in TERMS:
        assert term.long == found.get(term.anchor, found.get(term.key)), term.name
    # no term is defined twice: a term the body defines has no Glossary entry
    assert not [t.name for t in TERMS if t.anchor in found and t.key in found]


def test_the_methodology_page_shows_each_definition_once_from_the_doc(site: Path) -> None:
    page = parse_html((site / "methodology.html").read_text(encoding="utf-8"))
    body = parse_html(str(markdown(body_without_glossary(DOC), notes=False)))

    def text(node: Any) -> str:
        return " ".join(node.text().split())

    dl = page.find("dl", "glossary")
    shown = {dt.attrs["id"]: text(dd) for dt, dd in zip(dl.find_all("dt"), dl.find_all("dd"),
                                                        strict=True)}
    for term in TERMS:
        dd = shown[term.anchor]
        assert dd == " ".join(parse_html(str(markdown(term.long, notes=False))).text().split())
        if term.anchor not in definitions(DOC):  # the body's own paragraph, word for word
            assert dd.lower() in text(body.find(id=term.key)).lower(), term.name
    assert "## Glossary" not in methodology_text()


def test_a_term_the_methodology_lacks_is_a_clear_error() -> None:
    found = definitions("# M\n\n- {#ttft}**TTFT** (time to first token): median\n  of a thing.\n\n"
                        "{#term-phase}**Phase**: prefill or decode.\n")
    assert found == {"ttft": "Median of a thing.", "term-phase": "Prefill or decode."}


def _decoy_project(tmp: Path) -> Path:
    project = tmp / "other-project"
    (project / "docs").mkdir(parents=True)
    (project / "docs" / "methodology.md").write_text("# Decoy\n\nNOT OUR METHODOLOGY.\n")
    return project


def test_build_site_in_another_project_publishes_our_methodology(tmp_path: Path,
                                                                 site: Path) -> None:
    project = _decoy_project(tmp_path)
    here = Path.cwd()
    os.chdir(project)
    try:
        build_site(site.parent / "data", tmp_path / "out")
    finally:
        os.chdir(here)
    html = (tmp_path / "out" / "methodology.html").read_text(encoding="utf-8")
    assert "NOT OUR METHODOLOGY" not in html
    assert "Largest context." in html


def test_the_installed_builder_finds_its_methodology_without_a_checkout(tmp_path: Path,
                                                                       site: Path) -> None:
    """The wheel's layout (pyproject force-include): site_builder/methodology.md and
    site_builder/templates, no docs/ beside the package; run from a decoy project."""
    conf = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = conf["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert shipped["docs/methodology.md"] == "site_builder/methodology.md"
    assert not (REPO / "templates" / "methodology.md").exists()  # no second copy
    lib = tmp_path / "site-packages"
    for pkg in ("rundir", "site_builder"):
        shutil.copytree(REPO / pkg, lib / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for src, dest in shipped.items():
        (shutil.copytree if (REPO / src).is_dir() else shutil.copy)(REPO / src, lib / dest)
    project = _decoy_project(tmp_path)
    code = ("from site_builder.glossary import methodology_path; "
            "from site_builder.publish import build_site; "
            f"print(methodology_path()); build_site({str(site.parent / 'data')!r}, 'out')")
    res = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(lib)}, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert Path(res.stdout.strip().splitlines()[0]) == lib / "site_builder" / "methodology.md"
    html = (project / "out" / "methodology.html").read_text(encoding="utf-8")
    assert "NOT OUR METHODOLOGY" not in html and "Largest context." in html


def test_the_live_display_uses_the_published_words() -> None:
    plan = make_plan(contexts=[8192, 257_984], concurrency=[1, 64], max_output=4096,
                     max_model_len=262_144, kv_budget=1_000_000, prefill=False)
    out = io.StringIO()
    progress = Progress(Console(file=out, width=200))
    progress.plan = plan
    fast, queued, over = Cell(contract.DECODE, 8192, 1), Cell(contract.DECODE, 8192, 64), plan.cells[-1]
    progress.end(fast, SimpleNamespace(status=contract.VALID, window=(0, 1), reason=None,
                                       figures=SimpleNamespace(total_tok_s=17_649.9)))
    progress.end(queued, SimpleNamespace(status=contract.REQUESTS_QUEUED, window=(0, 1), reason=None,
                                         figures=SimpleNamespace(total_tok_s=6216.04)))
    progress.end(over, SimpleNamespace(status=contract.OVER_CAPACITY, window=None, reason=None))
    assert progress.results[fast.key] == words.tok_s(17_649.9) == "17.6K"
    # a cell that is not Valid shows its status word under its number, as the page
    # does; "*" means client-bound only (issue 32)
    assert progress.results[queued.key] == (words.tok_s(6216.04) + "\n"
                                            + words.status_label(contract.REQUESTS_QUEUED))
    assert progress.results[over.key] == words.status_label(contract.OVER_CAPACITY)
    progress.stop()
    shown = out.getvalue()
    assert re.search(r"\b251K\b", shown) and words.context_label(257_984) == "251K"
