"""Model families (issue 13 item 1): the derivation rule, the run card's override,
the contract's optional `model.family`, and the bundled site's family pages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bench.run.runcard import read_run_card
from rundir.contract import RUN_YAML, ContractError, RunInfo
from rundir.io import read_run, read_run_info, write_run_info
from rundir.slugs import slugify
from site_builder.families import family_of
from site_builder.publish import build_site
from site_builder.views import RunView, family_groups
from tests.support.chromium import parse_html
from tests.support.synthetic_runs import run_info

REPO = Path(__file__).resolve().parents[2]

# (model name as published, engine.quantization, family, variant)
REAL_NAMES = [
    ("Kimi-K2.6", "INT4", "Kimi-K2.6", "INT4"),
    ("Kimi-K2.6-NVFP4", "NVFP4", "Kimi-K2.6", "NVFP4"),
    ("Kimi-K2.6-NVFP4", None, "Kimi-K2.6", "NVFP4"),
    ("Qwen3.5-4B", "BF16", "Qwen3.5-4B", "BF16"),
    ("Qwen3-30B-A3B", None, "Qwen3-30B-A3B", ""),
    ("Llama-3.1-8B-Instruct-AWQ", None, "Llama-3.1-8B-Instruct", "AWQ"),
    ("Qwen2.5-7B-Instruct-GPTQ-Int4", None, "Qwen2.5-7B-Instruct", "GPTQ Int4"),
    ("Qwen2.5-7B-Instruct-GPTQ-Int4", "gptq", "Qwen2.5-7B-Instruct", "gptq"),
    ("Qwen3-30B-A3B-GGUF", None, "Qwen3-30B-A3B", "GGUF"),
    ("Meta-Llama-3.1-8B-Instruct-Q4_K_M", None, "Meta-Llama-3.1-8B-Instruct", "Q4_K_M"),
    ("Mistral-7B-Instruct-v0.3.Q4_K_M.gguf", None, "Mistral-7B-Instruct-v0.3", "Q4_K_M gguf"),
    ("gemma-3-27b-it-qat-q4_0-gguf", None, "gemma-3-27b-it", "qat q4_0 gguf"),
    ("DeepSeek-V3-FP8", None, "DeepSeek-V3", "FP8"),
    ("deepseek-v3-fp8", None, "deepseek-v3", "fp8"),
    ("Meta-Llama-3.1-8B-Instruct-FP8-dynamic", None, "Meta-Llama-3.1-8B-Instruct", "FP8-dynamic"),
    ("Meta-Llama-3.1-70B-Instruct-quantized.w8a8", None, "Meta-Llama-3.1-70B-Instruct",
     "quantized w8a8"),
    ("Llama-3.3-70B-Instruct-bnb-4bit", None, "Llama-3.3-70B-Instruct", "bnb 4bit"),
    ("mlx-community/Qwen3-4B-4bit", None, "Qwen3-4B", "4bit"),
    ("Llama-2-7B-GPTQ-4bit-128g", None, "Llama-2-7B", "GPTQ 4bit 128g"),
    ("gpt-oss-120b", "MXFP4", "gpt-oss-120b", "MXFP4"),
    ("Qwen3-235B-A22B-Instruct-2507-FP8", "FP8", "Qwen3-235B-A22B-Instruct-2507", "FP8"),
    ("Llama-3.1-8B-Instruct-BF16", None, "Llama-3.1-8B-Instruct", "BF16"),
    ("tiny-random-llama (test model)", "F32", "tiny-random-llama (test model)", "F32"),
]


@pytest.mark.parametrize(("name", "quant", "family", "variant"), REAL_NAMES,
                         ids=[f"{n}|{q}" for n, q, _, _ in REAL_NAMES])
def test_family_of_real_model_names(name: str, quant: str | None, family: str,
                                    variant: str) -> None:
    assert family_of(name, quant, None) == (family, variant)


@pytest.mark.parametrize(("name", "quant"), [(n, q) for n, q, _, _ in REAL_NAMES])
def test_explicit_family_wins(name: str, quant: str | None) -> None:
    """The run card's `model.family` is the family as written; the variant is unchanged."""
    family, variant = family_of(name, quant, "My Family")
    assert family == "My Family" and variant == family_of(name, quant, None)[1]


def test_blank_explicit_family_is_derived() -> None:
    assert family_of("Kimi-K2.6-NVFP4", "NVFP4", "  ") == ("Kimi-K2.6", "NVFP4")


def test_the_quantization_field_is_consulted() -> None:
    """A suffix the token list does not know is removed when it is the run's quantization."""
    assert family_of("Foo-7B-compressed-tensors", "compressed-tensors", None) == (
        "Foo-7B", "compressed-tensors")
    assert family_of("Foo-7B-compressed_tensors", "Compressed-Tensors", None)[0] == "Foo-7B"
    assert family_of("Foo-7B-compressed-tensors", None, None)[0] == "Foo-7B-compressed-tensors"


def test_case_and_separators_do_not_split_a_family() -> None:
    slugs = {slugify(family_of(n, None, None)[0]) for n in (
        "Kimi-K2.6", "kimi-k2.6-nvfp4", "KIMI-K2.6_INT4", "moonshotai/Kimi-K2.6")}
    assert slugs == {"kimi-k2.6"}


def test_only_suffixes_are_removed_and_never_the_whole_name() -> None:
    assert family_of("GGUF", None, None) == ("GGUF", "")
    assert family_of("_GGUF", None, None) == ("_GGUF", "")  # a suffix with nothing before it
    assert family_of("-int4", "INT4", None) == ("-int4", "INT4")
    assert family_of("AWQ-Llama-8B", None, None) == ("AWQ-Llama-8B", "")
    assert family_of("Qwen3-4B", None, None) == ("Qwen3-4B", "")  # a size is not a format
    assert family_of("Mixtral-8x7B", None, None) == ("Mixtral-8x7B", "")


# ---- the contract and the run card ---------------------------------------------------

def test_old_run_yaml_without_family_still_loads() -> None:
    """The bundled runs predate the field: they read, and their family is derived."""
    kimi = read_run(REPO / "data" / "kimi-k2.6-nvfp4-rtx-pro-6000-blackwell-server-edition-x8"
                    "-vllm-0.1.dev1-g9fedd24fa-38f4010f").info
    assert kimi.model.family is None
    raw = yaml.safe_load((REPO / "data" / kimi.run_id / RUN_YAML).read_text(encoding="utf-8"))
    assert "family" not in raw["model"]
    assert family_of(kimi.model.name or "", kimi.engine.quantization, kimi.model.family) == (
        "Kimi-K2.6", "NVFP4")


def test_family_is_written_only_when_set(tmp_path: Path) -> None:
    plain = run_info("plain")
    write_run_info(tmp_path / "plain", plain)
    raw = yaml.safe_load((tmp_path / "plain" / RUN_YAML).read_text(encoding="utf-8"))
    assert "family" not in raw["model"]
    named = run_info("named", info={"model": {"family": "Synth"}})
    write_run_info(tmp_path / "named", named)
    raw = yaml.safe_load((tmp_path / "named" / RUN_YAML).read_text(encoding="utf-8"))
    assert raw["model"]["family"] == "Synth"
    assert read_run_info(tmp_path / "named").model.family == "Synth"


def test_family_must_be_a_string() -> None:
    data = run_info("x").to_dict()
    data["model"]["family"] = 5
    with pytest.raises(ContractError, match=r"run.yaml: field model.family: expected"):
        RunInfo.from_dict(data)


def test_run_card_sets_family(tmp_path: Path) -> None:
    card = tmp_path / "card.yaml"
    card.write_text("model:\n  name: Kimi-K2.6-NVFP4\n  family: Kimi K2.6\n", encoding="utf-8")
    assert read_run_card(card).model.values.family == "Kimi K2.6"
    card.write_text("model:\n  family: [a, b]\n", encoding="utf-8")
    with pytest.raises(ContractError) as err:
        read_run_card(card)
    assert "field model.family" in str(err.value) and "\n" not in str(err.value)


# ---- grouping ------------------------------------------------------------------------

def _view(run_id: str, name: str, quant: str | None, gpu: str,
          family: str | None = None) -> RunView:
    info = run_info(run_id, info={"model": {"name": name, "family": family},
                                  "engine": {"quantization": quant},
                                  "hardware": {"gpu_name": gpu}})
    return RunView(info, None, run_id)  # type: ignore[arg-type]  # grouping reads no cells


def test_family_groups_join_variants_and_prefer_explicit_names() -> None:
    runs = [_view("b", "Kimi-K2.6-NVFP4", "NVFP4", "RTX PRO 6000"),
            _view("a", "Kimi-K2.6", "INT4", "H200"),
            _view("c", "kimi-k2.6", None, "B200", family="Kimi K2.6"),
            _view("d", "Qwen3.5-4B", "BF16", "H200")]
    groups = family_groups(runs)
    assert [(g.slug, g.name, [r.run_id for r in g.runs]) for g in groups] == [
        ("kimi-k2.6", "Kimi K2.6", ["c", "a", "b"]),
        ("qwen3.5-4b", "Qwen3.5-4B", ["d"])]
    assert groups[0].variants == ["INT4", "NVFP4"]
    assert runs[0].short_label.endswith("· NVFP4")


# ---- the bundled site ----------------------------------------------------------------

@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("families")
    report = build_site(REPO / "data", out / "site", cache_dir=out / "cache")
    assert report.errors == []
    return out / "site"


def test_bundled_kimi_family_page_holds_both_runs(bundled: Path) -> None:
    assert not (bundled / "models" / "kimi-k2.6-nvfp4.html").exists()
    doc = parse_html((bundled / "models" / "kimi-k2.6.html").read_text(encoding="utf-8"))
    assert "Kimi-K2.6" in doc.find("h1").text()
    rows = doc.find("table", "runs").find("tbody").rows()
    assert [(" ".join(r[0].split()[:2]), r[2]) for r in rows] == [
        ("H200 SXM", "INT4"), ("RTX PRO", "NVFP4")]
    heads = [m.find("h3").text() for m in doc.find_all("section", "mini-matrix")]
    assert heads == ["H200 SXM 141GB ×8 · vllm 0.29.0 · INT4",
                     "RTX PRO 6000 Blackwell Server Edition 96GB ×8 · vllm 0.1.dev1+g9fedd24fa · NVFP4"]
    links = {a.attrs["href"] for a in doc.find("table", "runs").find_all("a")}
    runs = json.loads((bundled / "index.json").read_text(encoding="utf-8"))["runs"]
    kimi = [r["page"] for r in runs if r["model"].startswith("Kimi")]
    assert len(kimi) == 2 and {f"../{p}" for p in kimi} <= links


def test_bundled_index_carries_each_runs_family(bundled: Path) -> None:
    runs = json.loads((bundled / "index.json").read_text(encoding="utf-8"))["runs"]
    kimi = [r for r in runs if r["family_slug"] == "kimi-k2.6"]
    assert sorted((r["family"], r["variant"]) for r in kimi) == [
        ("Kimi-K2.6", "INT4"), ("Kimi-K2.6", "NVFP4")]
    assert all(r["family"] for r in runs)
    header = (bundled / "index.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert {"family", "family_slug", "variant"} <= set(header)
    page = (bundled / kimi[1]["page"]).read_text(encoding="utf-8")
    assert '../../models/kimi-k2.6.html">All Kimi-K2.6 runs' in page
