"""One slug rule (rundir.slugs) for run ids, site folders and heading anchors (issue 11)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rundir.slugs import slugify, unique_slugs

HERE = Path(__file__).resolve().parents[1]  # tests/


@pytest.mark.parametrize(("text", "slug"), [
    ("Qwen/Qwen3.5-4B", "qwen-qwen3.5-4b"),
    ("my_model v2", "my_model-v2"),
    ("a -- b", "a-b"),
    ("..hidden.", "hidden"),
    ("../../etc", "etc"),
    ("Ünïcode", "n-code"),
])
def test_the_rule(text: str, slug: str) -> None:
    assert slugify(text) == slug


def test_long_names_stay_distinct_and_short() -> None:
    a, b = slugify("x" * 100 + "a"), slugify("x" * 100 + "b")
    assert a != b and len(a) <= 80 and len(b) <= 80
    assert re.fullmatch(r"x{71}-[0-9a-f]{8}", a)


def test_fallback_and_unique() -> None:
    assert slugify("<>") == "run" and slugify("!!", "section") == "section"
    assert unique_slugs(["A", "a", "a!"]) == ["a", "a-2", "a-3"]


def test_existing_run_ids_are_their_own_site_slugs() -> None:
    """Site folders of the shipped data keep their names: each run id under 80
    characters is its slug; the longer ones keep the shortened, hashed form."""
    data = HERE.parent / "data"
    ids = sorted(p.name for p in data.iterdir() if (p / "run.yaml").is_file())
    if not ids:
        pytest.skip("no runs in data/")
    for run_id in ids:
        slug = slugify(run_id)
        if len(run_id) <= 80:
            assert slug == run_id
        else:
            assert slug.startswith(run_id[:60]) and len(slug) <= 80
            assert re.search(r"-[0-9a-f]{8}$", slug)


def test_collector_importer_and_headings_use_the_rule() -> None:
    """No module keeps a rule of its own."""
    from bench.run import runner
    from importer import write
    from site_builder import render

    assert runner.slugify is slugify and write.slugify is slugify and render.slugify is slugify
    for module in (runner, write, render):
        assert not hasattr(module, "_slug")


def test_heading_anchors_follow_the_rule() -> None:
    from site_builder.render import markdown

    page = str(markdown("## Qwen3.5 on 8 GPUs\n\n## !!!\n", notes=False))
    assert 'id="qwen3.5-on-8-gpus"' in page
    assert 'id="section"' in page


def test_imported_ids_keep_their_readable_part() -> None:
    """The importer's ids (readable part cut at 120, then the content digest)
    did not change with the shared rule: the shipped data's ids start the same."""
    from importer.parse import parse_page
    from importer.write import read_page_text, run_id_for

    seeds = sorted((HERE / "data" / "import" / "seeds").glob("*.txt"))
    if not seeds:
        pytest.skip("no seed pages")
    data = [p.name for p in (HERE.parent / "data").iterdir()]
    for seed in seeds:
        page = parse_page(read_page_text(seed)[0])
        readable = run_id_for(page).rsplit("-", 1)[0]
        assert any(name.rsplit("-", 1)[0] == readable for name in data), readable
