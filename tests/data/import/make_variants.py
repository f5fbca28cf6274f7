"""Regenerate the variant pages in this folder from the seed copies in seeds/.

Why generated: each variant is a seed re-saved the way another browser or
an older page layout would give it, so it must hold exactly the seed's data.
Run ``python tests/data/import/make_variants.py`` after changing a seed; the
outputs are committed, the tests only read them.
"""

from __future__ import annotations

import re
from pathlib import Path

from importer.parse import HEADINGS as PAGE_HEADINGS

HERE = Path(__file__).resolve().parent
SEEDS = HERE / "seeds"
HEADINGS = ("Hardware", "Engine", "Run")


def _meta_to_colon(lines: list[str]) -> list[str]:
    """'- Key' / '- Value' (value maybe without '- ') -> 'Key: Value'."""
    out: list[str] = []
    block = None
    pending = None
    for line in lines:
        if line in HEADINGS:
            block = line
            out.append(line)
            continue
        if line.startswith("Launch command"):
            block = None
        if block is None:
            out.append(line)
            continue
        body = line[2:] if line.startswith("- ") else line
        if pending is None:
            pending = body
        else:
            out.append(f"{pending}: {body}")
            pending = None
    return out


def _pipe_to_tsv(line: str) -> str | None:
    """A Markdown pipe row -> tab-separated; the separator row -> None."""
    start = line.index("|")
    cells = [c.strip() for c in line[start:].strip().strip("|").split("|")]
    if all(re.fullmatch(r"-{3,}", c) for c in cells):
        return None
    return line[:start] + "\t".join(cells)


def kv_tsv() -> str:
    """int4 seed: 'Key: value' metadata, tab-separated tables, no blank lines,
    by/Measured lines, an unglued launch command given as 'Launch command: ...'."""
    lines = (SEEDS / "kimi-k2.6-int4-h200x8.txt").read_text(encoding="utf-8").splitlines()
    lines = _meta_to_colon(lines)
    lines.insert(3, "by @someone")
    lines.insert(4, "Measured Mar 3, 2026, 14:05 UTC")
    out: list[str] = []
    for i, line in enumerate(lines):
        if line == "Launch command":
            command = lines[i + 1]
            lines[i + 1] = ""
            out += [f"Launch command: {command.removesuffix('Prefill')}", "Prefill"]
            continue
        if not line:
            continue
        if "|" in line:
            if line.startswith("Latencies are medians"):
                head, _, rest = line.partition("|")
                out.append(head)
                line = "|" + rest
            tsv = _pipe_to_tsv(line)
            if tsv is not None:
                out.append(tsv)
            continue
        out.append(line)
    return "\n".join(out) + "\n"


NVFP4_PREFILL = {
    "6,2161,317": "6,216 1,317",
    "6,0642,676": "6,064 2,676",
    "5,7415,627": "5,741 5,627",
    "5,17312,462": "5,173 12,462",
    "4,36329,514": "4,363 29,514",
    "3,29976,496": "3,299 76,496",
    "3,25479,118": "3,254 79,118",
}


def spaced() -> str:
    """nvfp4 seed: blank lines between blocks, every value with '- ', separators
    the browser kept (spaces, ' · '), no-break spaces, CRLF line endings."""
    text = (SEEDS / "kimi-k2.6-nvfp4-rtxpro6000x8.txt").read_text(encoding="utf-8")
    text = text.replace("NVFP46 contexts", "NVFP4 · 6 contexts")
    text = text.replace("\n9fedd24fa864\n", "\n- 9fedd24fa864\n")
    for glued, spaced_out in NVFP4_PREFILL.items():
        text = text.replace(f"context{glued} ms TTFT", f"context {spaced_out} ms TTFT")
    text = text.replace("6,216 1,317 ms", "6,216 1,317\u00a0ms")
    text = re.sub(r"\| (\d[\d,]*\.\d)(\d[\d,]*) ms TTFT", r"| \1 \2 ms TTFT", text)
    text = text.replace("requests| Context", "requests\n\n| Context")
    text = text.replace("requests.| Phase", "requests.\n| Phase")
    for heading in PAGE_HEADINGS:
        text = text.replace(f"\n{heading}\n", f"\n\n{heading}\n\n")
    return text.replace("\n", "\r\n")


LOOPED_MATRIX = (
    "| 1019K | 9.1Looped2,950 ms TTFT | Looped | Error | Over capacity | Over capacity "
    "| Over capacity | Over capacity | Over capacity |"
)
DASHES = " | ".join(["—"] * 8)
LOOPED_ROWS = [
    "| Sustained decode | 1019K | 1 | Looped | 9.1 | 9.2 | 2,950 ms | 108.7 ms | 1.0 | 0 "
    "| 273 | 30.0 s |",
    f"| Sustained decode | 1019K | 2 | Looped | {DASHES} |",
    f"| Sustained decode | 1019K | 4 | Error | {DASHES} |",
] + [f"| Sustained decode | 1019K | {c} | Over capacity | {DASHES} |" for c in (8, 16, 32, 64, 128)]


def looped_1m() -> str:
    """qwen seed grown to 1019K/1024K contexts with Looped and Error cells, the
    by/Measured line glued, blank lines between blocks."""
    text = (SEEDS / "qwen3.5-4b-bf16-rtxpro6000.txt").read_text(encoding="utf-8")
    text = text.replace(
        "BF166 contexts (8K–251K) × 8 concurrency levels (1–128) · prefill at 8K, 16K, 32K, "
        "64K, 128K, 251K, 256K",
        "BF167 contexts (8K–1019K) × 8 concurrency levels (1–128) · prefill at 8K, 16K, 32K, "
        "64K, 128K, 251K, 256K, 1019K, 1024K\nby @qwen.fanMeasured Mar 3, 2026, 14:05 UTC",
    )
    text = text.replace(
        "256K context12.3K20,999 ms TTFT",
        "256K context12.3K20,999 ms TTFT\n1019K context4,210247,852 ms TTFT\n1024K contextError",
    )
    last_matrix = (
        "| Over capacity | Over capacity | Over capacity | Over capacity | Over capacity |\n"
    )
    i = text.index("| 251K | 28.4654 ms TTFT")
    j = text.index(last_matrix, i) + len(last_matrix)
    text = text[:j] + LOOPED_MATRIX + "\n" + text[j:]
    pre = "| Prefill | 256K | 1 | Valid | 12.3K | — | 20,999 ms | — | — | 1 | — | — |\n"
    text = text.replace(
        pre,
        pre
        + "| Prefill | 1019K | 1 | Valid | 4,210.0 | — | 247,852 ms | — | — | 1 | — | — |\n"
        + f"| Prefill | 1024K | 1 | Error | {' | '.join(['—'] * 8)} |\n",
    )
    end = f"| Sustained decode | 251K | 128 | Over capacity | {DASHES} |"
    text = text.replace(end, end + "\n" + "\n".join(LOOPED_ROWS))
    text = text.replace(
        "Requests queued: the server",
        "Looped: the model repeated the same text, so the measurement was discarded. "
        "Requests queued: the server",
    )
    for heading in (
        "Hardware",
        "Engine",
        "Run",
        "Launch command",
        "Sustained decode",
        "All measurements",
    ):
        text = text.replace(f"\n{heading}\n", f"\n\n{heading}\n")
    return text


VARIANTS = {
    "kimi-k2.6-int4-h200x8.kv-tsv.txt": kv_tsv,
    "kimi-k2.6-nvfp4-rtxpro6000x8.spaced.txt": spaced,
    "qwen3.5-4b-bf16-1m-looped.txt": looped_1m,
}


if __name__ == "__main__":
    for name, make in VARIANTS.items():
        (HERE / name).write_bytes(make().encode("utf-8"))
        print(HERE / name)
