"""Model families: which base model a run measured, and in which variant.

Readers compare runs of one model across hardware, engines and
quantizations ("Kimi-K2.6" in INT4 and "Kimi-K2.6-NVFP4" are one model in
two formats), so the site groups runs by family rather than by exact name.
Only the builder applies the rule (it groups pages by it), so it lives in
site_builder/; what a run may state, `model.family`, is the contract's
(rundir/contract/).

The rule (documented in docs/data-format.md, "Model families"):

1. An explicit `model.family` (run card / run.yaml) wins, as written.
2. Otherwise the family is the model's display name with any `org/` prefix
   dropped and quantization / format suffixes removed from its end, one at a
   time, case-insensitively: a suffix is a known quantization or format token
   (NVFP4, MXFP4, FP8, FP8-dynamic, INT4, INT8, W4A16, W8A8, AWQ, GPTQ, GGUF,
   GGML, EXL2, BF16, FP16, F16, F32, NF4, BNB, 4bit, 8bit, MLX, QAT,
   "quantized", a group size like 128g, llama.cpp types like Q4_K_M, Q8_0,
   IQ4_XS) or the run's own `engine.quantization` value, preceded by `-`,
   `_`, `.` or a space. Nothing is removed if that would leave nothing.
3. Runs whose families have the same slug (rundir.slugs) are one family, so
   case and separators do not split a family.

The variant is `engine.quantization` when the run states it, else the
suffixes removed from the name (``GPTQ Int4``), else empty (not stated).
"""

from __future__ import annotations

import re

# One suffix token each; matched whole, case-insensitively, at the end of the name.
_TOKENS = (
    r"nvfp4", r"mxfp[468]", r"fp[48](?:[-_](?:dynamic|static|block))?", r"int[48]",
    r"w\d+a\d+(?:[-_]fp8)?", r"awq", r"gptq", r"gguf", r"ggml", r"exl[23]", r"hqq",
    r"bf16", r"fp16", r"fp32", r"f16", r"f32", r"nf4", r"bnb", r"[48][-_]?bit", r"mlx",
    r"qat", r"quantized", r"\d+g",
    r"i?q\d(?:_[0-9a-z]+){0,2}",  # llama.cpp: Q4_K_M, Q8_0, IQ4_XS, Q5_K
)
_SEP = "-_. "
_SUFFIX = re.compile(r"[-_. ](?:" + "|".join(_TOKENS) + r")$", re.IGNORECASE)


def _field_suffix(quantization: str | None) -> re.Pattern[str] | None:
    """The run's own quantization value as a suffix pattern, any separators between its parts."""
    parts = [p for p in re.split(r"[-_. ]+", quantization or "") if p]
    if not parts:
        return None
    body = r"[-_. ]?".join(re.escape(p) for p in parts)
    return re.compile(r"[-_. ]" + body + r"$", re.IGNORECASE)


def family_of(model_name: str, quantization: str | None,
              explicit: str | None) -> tuple[str, str]:
    """(family display name, variant label) of a run by the rule in the module docstring.

    model_name is the run's display name; quantization is `engine.quantization`;
    explicit is `model.family` (wins when set)."""
    name = (model_name or "").strip()
    name = name.rstrip("/").rsplit("/", 1)[-1] or name
    own = _field_suffix(quantization)
    removed: list[str] = []
    base = name
    while True:
        hit = (own.search(base) if own else None) or _SUFFIX.search(base)
        if not hit or not base[:hit.start()].strip(_SEP):
            break
        removed.insert(0, base[hit.start() + 1:])
        base = base[:hit.start()].rstrip(_SEP)
    quant = (quantization or "").strip()
    variant = quant or " ".join(removed)
    family = (explicit or "").strip() or base
    return family, variant


__all__ = ["family_of"]
