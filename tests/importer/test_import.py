"""``bench import``: published Speed test matrix pages -> run directories.

Why the checks are built the way they are: the reference for every number is
an independent, deliberately minimal reading of each seed's All measurements
table written here (split pipe rows, strip units), not the importer's own
parser; the matrix and the Prefill block are checked by printing the parsed
values back the way the page prints them and comparing text.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from click.testing import CliRunner

from importer import PageError, PublishedCell, numbers, parse_page
from importer.cli import import_cmd
from importer.write import import_file, run_id_for
from rundir.contract import CELLS_FILE, CELLS_SCHEMA, RUN_YAML
from rundir.io import read_run, write_run_info, write_table

HERE = Path(__file__).resolve().parents[1]  # tests/
DATA = HERE / "data" / "import"
SEED_NAMES = sorted(p.name for p in (DATA / "seeds").glob("*.txt"))
QWEN = "qwen3.5-4b-bf16-rtxpro6000.txt"
LOOPED = "qwen3.5-4b-bf16-1m-looped.txt"
STATUS = {
    "Valid": "valid",
    "Over capacity": "over_capacity",
    "Requests queued": "requests_queued",
    "Looped": "looped",
    "Error": "error",
}
WORD = {v: k for k, v in STATUS.items()}


def seed_path(name: str) -> Path:
    """A published page kept verbatim in tests/data/import/seeds."""
    return DATA / "seeds" / name


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


# -- the independent minimal reading ------------------------------------------


def _value(text: str) -> float | None:
    if text == "—":
        return None
    text = text.removesuffix(" ms").removesuffix(" s").replace(",", "")
    return float(text[:-1]) * 1000 if text.endswith("K") else float(text)


def table_rows(text: str) -> list[dict[str, object]]:
    """The All measurements rows, read as plainly as possible."""
    out = []
    for line in text.splitlines():
        if not line.startswith(("| Prefill |", "| Sustained decode |")):
            continue
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        assert len(c) == 12, line
        out.append(
            {
                "phase": "prefill" if c[0] == "Prefill" else "decode",
                "context": int(c[1].removesuffix("K")) * 1024,
                "concurrency": int(c[2]),
                "status": STATUS[c[3]],
                "total_tok_s": _value(c[4]),
                "per_request_tok_s": _value(c[5]),
                "ttft_ms": _value(c[6]),
                "tbt_ms": _value(c[7]),
                "avg_active": _value(c[8]),
                "completed": _value(c[9]),
                "output_tokens": _value(c[10]),
                "measured_s": _value(c[11]),
            }
        )
    return out


def meta_pairs(text: str) -> dict[str, dict[str, str]]:
    """Hardware/Engine/Run as {block: {key: value}} from '- Key' / '- Value' lines."""
    lines = text.splitlines()
    out: dict[str, dict[str, str]] = {}
    for block, end in (("Hardware", "Engine"), ("Engine", "Run"), ("Run", "Launch command")):
        body = lines[lines.index(block) + 1 : lines.index(end)]
        items = [ln.removeprefix("- ") for ln in body]
        out[block] = dict(zip(items[::2], items[1::2], strict=True))
    return out


def launch_command(text: str) -> str:
    after = text.split("\nLaunch command\n", 1)[1]
    return after.split("\nprompt tok/s by context length", 1)[0].removesuffix("Prefill").strip()


# -- printing parsed values the way the page does ------------------------------


def _rate(v: float | None, whole: bool = False) -> str:
    if v is None:
        return ""
    if v >= 10_000:
        return f"{v / 1000:.1f}".removesuffix(".0") + "K"
    return f"{v:,.0f}" if whole else f"{v:,.1f}"


def _ttft(v: float | None) -> str:
    return "" if v is None else (f"{v:.1f} ms TTFT" if v < 10 else f"{v:,.0f} ms TTFT")


def shown(cell: PublishedCell, whole: bool = False) -> str:
    """How a matrix cell (or, with whole, a Prefill block entry) prints a cell."""
    if cell.status == "over_capacity":
        return "Over capacity"
    word = "" if cell.status == "valid" else WORD[cell.status]
    return _rate(cell.total_tok_s, whole) + word + _ttft(cell.ttft_ms)


def matrix_texts(text: str) -> dict[tuple[int, int], str]:
    lines = text.splitlines()
    header = next(ln for ln in lines if "| Context |" in ln)
    conc = [int(x) for x in header.split("| Context |", 1)[1].strip(" |").split("|")]
    out = {}
    for ln in lines:
        m = re.match(r"^\| (\d+)K \|(.*)\|$", ln)
        if m:
            cells = [x.strip() for x in m[2].split("|")]
            for c, t in zip(conc, cells, strict=True):
                out[(int(m[1]) * 1024, c)] = t
    return out


def prefill_texts(text: str) -> dict[int, str]:
    out = {}
    for ln in text.splitlines():
        m = re.match(r"^(?:prompt tok/s by context length)?(\d+)K context(.*)$", ln)
        if m:
            out[int(m[1]) * 1024] = m[2]
    return out


# -- seeds ----------------------------------------------------------------------


def test_the_three_seed_pages_are_here() -> None:
    assert len(SEED_NAMES) == 3


def _cells_match_table(cells: list[dict[str, object]], text: str) -> None:
    expected = table_rows(text)
    assert len(cells) == len(expected) > 0
    for got, want in zip(cells, expected, strict=True):
        for key, value in want.items():
            assert got[key] == (pytest.approx(value) if isinstance(value, float) else value), (
                key,
                want,
            )


@pytest.mark.parametrize("name", [*SEED_NAMES, LOOPED])
def test_cells_equal_the_all_measurements_table(name: str) -> None:
    path = seed_path(name) if name in SEED_NAMES else DATA / name
    text = read(path)
    page = parse_page(text)
    _cells_match_table([dataclasses.asdict(c) for c in page.cells], text)


@pytest.mark.parametrize("name", [*SEED_NAMES, LOOPED])
def test_matrix_and_prefill_block_print_the_parsed_values(name: str) -> None:
    text = read(seed_path(name) if name in SEED_NAMES else DATA / name)
    page = parse_page(text)
    decode = {(c.context, c.concurrency): c for c in page.cells if c.phase == "decode"}
    prefill = {c.context: c for c in page.cells if c.phase == "prefill"}
    matrix = matrix_texts(text)
    assert set(matrix) == set(decode)
    for key, cell_text in matrix.items():
        assert cell_text == shown(decode[key]), key
    block = prefill_texts(text)
    assert set(block) == set(prefill)
    for ctx, line_text in block.items():
        assert line_text == shown(prefill[ctx], whole=True), ctx


@pytest.mark.parametrize("name", SEED_NAMES)
def test_written_run_round_trips_metadata_and_cells(name: str, tmp_path: Path) -> None:
    text = read(seed_path(name))
    result = import_file(seed_path(name), tmp_path)
    run = read_run(result.path)  # the contract's validation
    info = run.info
    assert run.imported and len(run.requests) == 0
    assert not (result.path / "requests.parquet").exists()
    assert info.imported is not None and info.imported.source_file == name
    assert re.fullmatch(r"[0-9a-f]{64}", info.imported.source_sha256 or "")
    assert info.imported.format == "speed-test-matrix/text; metadata=dash; tables=pipe"
    _cells_match_table(
        [{k.removeprefix("pub_"): v for k, v in r.items()} for r in run.cells.to_pylist()], text
    )

    hw, eng, model, params = info.hardware, info.engine, info.model, info.parameters
    count, each = hw.gpu_count or 0, hw.vram_gb_per_gpu or 0
    vram = f"{each * count:g} GB ({count} × {each:g} GB)" if count > 1 else f"{each:g} GB"
    printed = {
        "Hardware": {"Type": hw.type, "GPU": hw.gpu_name, "GPU count": str(hw.gpu_count),
                     "VRAM": vram, "OS": hw.os},
        "Engine": {"Engine": eng.name, "Version": eng.version, "Quantization": eng.quantization,
                   "Backend": eng.backend, "Repository": eng.repository, "Build": eng.build,
                   "Commit": eng.commit},
        "Run": {"Served model": model.served_name, "Revision": model.revision,
                "Benchmark tool": f"{params.tool_name} v{params.tool_version}",
                "Decode test": params.decode_test, "Prefill mode": params.prefill_mode,
                "Time per measurement": f"{params.duration_s:g} s",
                "Max output": f"{params.max_output_tokens:,} tokens"},
    }  # fmt: skip
    for block, pairs in meta_pairs(text).items():
        for key, value in pairs.items():
            assert printed[block][key] == value, (block, key)
    assert info.launch_command == launch_command(text)
    title = text.splitlines()[1]
    assert model.name == title.split(" on ", 1)[0]
    assert params.contexts == sorted({r["context"] for r in table_rows(text)
                                      if r["phase"] == "decode"})  # fmt: skip
    assert params.concurrency == [1, 2, 4, 8, 16, 32, 64, 128]
    assert [c // 1024 for c in params.prefill_contexts] == [8, 16, 32, 64, 128, 251, 256]
    assert info.submitter is None and info.measured_at is None
    assert "label" in info.notes  # contexts are label-precise only


def test_specific_published_values() -> None:
    """The examples of the brief, spelled out."""
    kimi = parse_page(read(seed_path("kimi-k2.6-int4-h200x8.txt")))
    assert (kimi.hardware.gpu_count, kimi.hardware.vram_gb_per_gpu) == (8, 141.0)
    assert kimi.model.name == "Kimi-K2.6"
    assert (kimi.parameters.tool_name, kimi.parameters.tool_version) == (
        "llm-inference-bench",
        "0.6.2",
    )
    assert kimi.launch_command is not None and kimi.launch_command.endswith(
        '"num_speculative_tokens":8}\''
    )
    qwen = parse_page(read(seed_path(QWEN)))
    assert (qwen.hardware.gpu_count, qwen.hardware.vram_gb_per_gpu) == (1, 96.0)
    assert (qwen.engine.name, qwen.engine.quantization) == ("vllm", "BF16")
    assert (qwen.parameters.duration_s, qwen.parameters.max_output_tokens) == (30.0, 4096)
    assert 257024 in qwen.parameters.contexts
    glued = next(
        c for c in qwen.cells if (c.phase, c.context, c.concurrency) == ("decode", 8192, 16)
    )
    assert (glued.total_tok_s, glued.ttft_ms) == (1829.9, 305.0)
    nvfp4 = parse_page(read(seed_path("kimi-k2.6-nvfp4-rtxpro6000x8.txt")))
    assert nvfp4.engine.commit == "9fedd24fa864"  # the value line without "- "
    assert nvfp4.cells[0].total_tok_s == 6216.0 and nvfp4.cells[0].ttft_ms == 1317.0


# -- variants -------------------------------------------------------------------


def test_key_value_tab_separated_variant_parses_to_identical_cells() -> None:
    seed = parse_page(read(seed_path("kimi-k2.6-int4-h200x8.txt")))
    variant = parse_page(read(DATA / "kimi-k2.6-int4-h200x8.kv-tsv.txt"))
    assert variant.cells == seed.cells
    assert variant.format == "speed-test-matrix/text; metadata=colon; tables=tsv"
    assert (variant.submitter, variant.measured_at) == ("someone", "2026-03-03T14:05:00Z")
    same = dataclasses.replace(variant, submitter=None, measured_at=None, format=seed.format)
    assert same == seed


def test_spaced_crlf_variant_is_the_same_run() -> None:
    seed = parse_page(read(seed_path("kimi-k2.6-nvfp4-rtxpro6000x8.txt")))
    variant = parse_page(read(DATA / "kimi-k2.6-nvfp4-rtxpro6000x8.spaced.txt"))
    assert variant.cells == seed.cells
    assert variant == seed
    assert run_id_for(variant) == run_id_for(seed)


def test_looped_variant_has_1m_contexts_looped_and_error() -> None:
    page = parse_page(read(DATA / LOOPED))
    assert page.parameters.contexts[-1] == 1019 * 1024
    assert page.parameters.prefill_contexts[-2:] == [1019 * 1024, 1024 * 1024]
    statuses = {(c.phase, c.context, c.concurrency): c.status for c in page.cells}
    assert statuses[("decode", 1019 * 1024, 1)] == "looped"
    assert statuses[("decode", 1019 * 1024, 4)] == "error"
    assert statuses[("prefill", 1024 * 1024, 1)] == "error"
    assert statuses[("decode", 8192, 128)] == "requests_queued"
    assert (page.submitter, page.measured_at) == ("qwen.fan", "2026-03-03T14:05:00Z")
    assert page.parameters.tool_version == "0.7.6"


def test_variant_files_are_up_to_date() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_variants", DATA / "make_variants.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, make in module.VARIANTS.items():
        assert (DATA / name).read_bytes() == make().encode("utf-8"), name


# -- bad input ------------------------------------------------------------------


def _qwen_lines() -> list[str]:
    return read(seed_path(QWEN)).split("\n")


def _replace_line(no: int, old: str, new: str) -> str:
    lines = _qwen_lines()
    assert old in lines[no - 1]
    lines[no - 1] = lines[no - 1].replace(old, new)
    return "\n".join(lines)


def _replace_tsv_line(no: int, old: str, new: str) -> str:
    lines = read(DATA / "kimi-k2.6-int4-h200x8.kv-tsv.txt").split("\n")
    assert old in lines[no - 1]
    lines[no - 1] = lines[no - 1].replace(old, new, 1)
    return "\n".join(lines)


BAD = {
    "unknown format": (
        "# speed-matrix\n\nA README, not a page.\n",
        "1: not a Speed test matrix page (no 'Speed test matrix' heading)",
    ),
    "truncated in the table": (
        "\n".join(_qwen_lines()[:100]),
        "100: All measurements has 35 rows, expected 55 (7 prefill + 6 contexts × 8 "
        "concurrency levels) (truncated page?)",
    ),
    "truncated mid row": (
        "\n".join(_qwen_lines()[:100]) + "\n| Sustained decode | 32K | 8 | Val",
        "101: All measurements row has 4 cells, header has 12",
    ),
    "truncated before the table": (
        "\n".join(_qwen_lines()[:60]),
        "60: page ends before the All measurements table (truncated page?)",
    ),
    "row with 11 cells": (
        _replace_line(77, "| 1,829.9 | 118.6 |", "| 1,829.9 |"),
        "77: All measurements row has 11 cells, header has 12",
    ),
    "number that does not parse": (
        _replace_line(77, "| 1,829.9 |", "| 1,8x9.9 |"),
        "77: All measurements: Total tok/s '1,8x9.9' is not a number",
    ),
    "latency without unit": (
        _replace_line(77, "| 305 ms |", "| 305 |"),
        "77: All measurements: TTFT '305' is not a number like '1,317 ms'",
    ),
    "matrix row with a missing cell": (
        _replace_line(55, "| 203.956 ms TTFT |", "|"),
        "55: Sustained decode matrix row has 8 cells, header has 9",
    ),
    "matrix disagrees with the table": (
        _replace_line(55, "1,829.9305 ms", "1,829.9306 ms"),
        "55: Sustained decode matrix cell 8K × 16 '1,829.9306 ms TTFT' disagrees with "
        "All measurements line 77",
    ),
    "summary announces more contexts than the matrix has": (
        _replace_line(3, "6 contexts", "7 contexts"),
        "60: Sustained decode matrix has 6 rows, the summary line says 7 contexts (truncated page?)",
    ),
    "summary announces fewer contexts than the matrix has": (
        _replace_line(3, "6 contexts", "5 contexts"),
        "3: Sustained decode matrix has 6 rows, the summary line says 5 contexts",
    ),
    "summary announces another number of levels": (
        _replace_line(3, "× 8 concurrency", "× 9 concurrency"),
        "53: Sustained decode matrix has 8 columns, the summary line says 9 levels",
    ),
    "prefill block disagrees with the table": (
        _replace_line(46, "32.9K", "33.9K"),
        "46: Prefill block 16K '33.9K493 ms TTFT' disagrees with All measurements line 67",
    ),
    "prefill block lists a context the table lacks": (
        _replace_line(72, "| Prefill | 256K |", "| Prefill | 255K |"),
        "51: Prefill block lists 256K but All measurements has no Prefill row for it",
    ),
    "pipe row cut after its last cell": (
        _replace_line(77, "| 30.0 s |", "| 30.0 s"),
        "77: All measurements row does not end with '|' (truncated page?)",
    ),
    "tab-separated row with a missing cell": (
        _replace_tsv_line(60, "\t25.2\t", "\t"),
        "60: All measurements row has 11 cells, header has 12",
    ),
    "unknown status": (
        _replace_line(77, "| Valid |", "| Fine |"),
        "77: All measurements: unknown status 'Fine'",
    ),
    "bad metadata number": (
        _replace_line(40, "- 30 s", "- thirty s"),
        "40: Time per measurement 'thirty s' is not a number like '30.0 s'",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_fails_with_one_line_and_writes_nothing(case: str, tmp_path: Path) -> None:
    text, message = BAD[case]
    page = tmp_path / "page.txt"
    page.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(import_cmd, [str(page), "--out", str(out)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == f"error: {page}:{message}\n"
    assert not out.exists() or not any(out.iterdir())


def test_registered_as_bench_import(tmp_path: Path) -> None:
    from bench.cli import main

    result = CliRunner().invoke(main, ["import", str(seed_path(QWEN)), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert read_run(Path(result.stdout.strip())).imported


def test_page_error_carries_the_line() -> None:
    with pytest.raises(PageError) as info:
        parse_page(BAD["row with 11 cells"][0])
    assert info.value.line == 77


def test_not_utf8_and_missing_file(tmp_path: Path) -> None:
    page = tmp_path / "page.txt"
    page.write_bytes(b"Speed test matrix\n\xff\xfe\n")
    result = CliRunner().invoke(import_cmd, [str(page), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.stderr == f"error: {page}:2: not a Speed test matrix page (not UTF-8 text)\n"
    missing = tmp_path / "nope.txt"
    result = CliRunner().invoke(import_cmd, [str(missing), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.stderr == f"error: {missing}: No such file or directory\n"


# -- run ids and existing directories ----------------------------------------------


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}  # fmt: skip


def test_same_page_twice_is_the_same_run_and_a_no_op(tmp_path: Path) -> None:
    seed = seed_path(QWEN)
    runner = CliRunner()
    first = runner.invoke(import_cmd, [str(seed), "--out", str(tmp_path)])
    assert first.exit_code == 0, first.output
    path = Path(first.stdout.strip())
    assert path.parent == tmp_path and (path / RUN_YAML).is_file()
    before = _tree(tmp_path)
    second = runner.invoke(import_cmd, [str(seed), "--out", str(tmp_path)])
    assert second.exit_code == 0
    assert Path(second.stdout.strip()) == path
    assert "already imported" in second.stderr
    assert _tree(tmp_path) == before
    other = import_file(seed, tmp_path / "elsewhere")
    assert other.path.name == path.name
    assert re.fullmatch(
        r"qwen3\.5-4b-rtx-pro-6000-blackwell-server-edition-x1-vllm-0\.30\.1rc1\.dev452-"
        r"g73a583112-[0-9a-f]{8}",
        path.name,
    )


def test_the_same_run_from_another_file_is_a_no_op(tmp_path: Path) -> None:
    first = import_file(seed_path("kimi-k2.6-nvfp4-rtxpro6000x8.txt"), tmp_path)
    again = import_file(DATA / "kimi-k2.6-nvfp4-rtxpro6000x8.spaced.txt", tmp_path)
    assert (first.created, again.created) == (True, False)
    assert again.path == first.path


def test_a_different_run_is_never_overwritten(tmp_path: Path) -> None:
    """The folder named by the id holds other numbers (edited by hand): refused."""
    first = import_file(seed_path(QWEN), tmp_path)
    run = read_run(first.path)
    rows = run.cells.to_pylist()
    rows[0]["pub_total_tok_s"] = (rows[0]["pub_total_tok_s"] or 0.0) + 1.0
    write_table(first.path, CELLS_FILE, pa.Table.from_pylist(rows, schema=CELLS_SCHEMA))
    before = _tree(first.path)
    result = CliRunner().invoke(import_cmd, [str(seed_path(QWEN)), "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: {first.path}: already holds a different run; not overwritten\n"
    )
    assert _tree(first.path) == before


def test_the_same_source_edited_by_hand_is_kept_as_it_is(tmp_path: Path) -> None:
    """Notes edited in the folder: still the same source, said so, nothing rewritten."""
    first = import_file(seed_path(QWEN), tmp_path)
    run = read_run(first.path)
    run.info.notes = "edited by hand"
    write_run_info(first.path, run.info)
    before = _tree(first.path)
    result = CliRunner().invoke(import_cmd, [str(seed_path(QWEN)), "--out", str(tmp_path)])
    assert result.exit_code == 0
    assert result.stdout == f"{first.path}\n"
    assert result.stderr == (
        f"already imported as {first.path}: the same source (the same published numbers); "
        "this file also differs in notes, nothing written (remove that folder to import "
        "this version instead)\n")
    assert _tree(first.path) == before


def test_out_must_not_be_a_run_directory(tmp_path: Path) -> None:
    first = import_file(seed_path(QWEN), tmp_path)
    result = CliRunner().invoke(import_cmd, [str(seed_path(QWEN)), "--out", str(first.path)])
    assert result.exit_code == 1
    assert "is a run directory" in result.stderr
    assert set(os.listdir(first.path)) == {"cells.parquet", "run.yaml", "manifest.json"}


def test_run_yaml_is_plain_and_complete(tmp_path: Path) -> None:
    result = import_file(DATA / "kimi-k2.6-int4-h200x8.kv-tsv.txt", tmp_path)
    data = yaml.safe_load((result.path / RUN_YAML).read_text(encoding="utf-8"))
    assert data["source"] == "imported"
    assert data["submitter"] == "someone"
    assert data["measured_at"] == "2026-03-03T14:05:00Z"
    assert data["imported"]["format"] == "speed-test-matrix/text; metadata=colon; tables=tsv"
    assert data["parameters"]["contexts"][-1] == 257024


def test_shipped_sample_data_validates() -> None:
    """The seeds imported into data/ read back under the contract."""
    data = HERE.parent / "data"
    runs = sorted(p for p in data.iterdir() if (p / RUN_YAML).is_file()) if data.is_dir() else []
    imported = [p for p in runs if read_run(p).imported]
    if not imported:
        pytest.skip("no imported runs in data/")
    for path in imported:
        info = read_run(path).info
        assert info.imported is not None and info.run_id == path.name


# -- numbers ----------------------------------------------------------------------


def test_numbers() -> None:
    assert numbers.parse_number("6,216.0") == 6216.0
    assert numbers.parse_number("17.6K") == 17600.0
    assert numbers.parse_number("10K") == 10000.0
    assert numbers.parse_ms("1,317 ms") == 1317.0
    assert numbers.parse_ms("4.8 ms") == 4.8
    assert numbers.parse_seconds("30.0 s") == 30.0
    assert numbers.parse_count("1,648") == 1648
    assert numbers.parse_tokens("4,096 tokens") == 4096
    assert numbers.parse_context("251K") == 257024
    assert numbers.parse_context("1019K") == 1019 * 1024
    assert numbers.parse_context("1024K") == 1048576
    assert numbers.parse_vram("1128 GB (8 × 141 GB)") == (1128.0, 8, 141.0)
    assert numbers.parse_vram("96 GB") == (96.0, None, 96.0)
    assert numbers.parse_tool("llm-inference-bench v0.7.6") == ("llm-inference-bench", "0.7.6")
    with pytest.raises(numbers.NumberError):
        numbers.parse_vram("1000 GB (8 × 141 GB)")
    assert numbers.is_missing("—")
    for bad in ("1,82", "01", "1.2.3", "", "K", "12 345"):
        with pytest.raises(numbers.NumberError):
            numbers.parse_number(bad)
    assert ("1,829.9", "305") in numbers.glued_splits("1,829.9305")
    assert ("05",) not in [s[1:] for s in numbers.glued_splits("1,829.9305")]
    assert numbers.glued_splits("55.0 85") == [("55.0", "85")]
    assert numbers.shown_agrees("8,820", 8820.0) and not numbers.shown_agrees("8,820", 8821.0)
    assert numbers.shown_agrees("17.6K", 17600.0) and numbers.shown_agrees("1,317 ms", 1317.0)


# The ids these pages get: the readable part, then the first 8 hex digits of the
# source key (rundir.identity). Pinned, so that a change to the key's canonical
# form, which would move every id, cannot pass unnoticed. Folders written under
# the ids of earlier importers are recognised by content (test_identity.py).
IDS = {
    "kimi-k2.6-int4-h200x8.txt": "kimi-k2.6-h200-sxm-x8-vllm-0.29.0-a503e4fb",
    "kimi-k2.6-nvfp4-rtxpro6000x8.txt":
        "kimi-k2.6-nvfp4-rtx-pro-6000-blackwell-server-edition-x8-vllm-0.1.dev1-g9fedd24fa-6862b836",
    "qwen3.5-4b-bf16-rtxpro6000.txt":
        "qwen3.5-4b-rtx-pro-6000-blackwell-server-edition-x1-vllm-0.30.1rc1.dev452-g73a583112-35e8723c",
}


@pytest.mark.parametrize("name", sorted(IDS))
def test_seed_pages_keep_their_ids(name: str) -> None:
    page = parse_page((DATA / "seeds" / name).read_text(encoding="utf-8"))
    assert run_id_for(page) == IDS[name]
