"""`--resume R`: what the resumed session measures, from R's run.yaml (pure).

Why: a resumed run must add cells to R's matrix, never re-plan it. The
matrix and every parameter that makes cells comparable (window, max output,
prefill repeats, KV budget, model) come from run.yaml. A flag may extend
the matrix (more contexts, concurrency levels or prefill contexts: new cells
are appended) or repeat R's own value; a flag that would change a parameter
is refused with one line, because cells measured under two settings would
be published side by side as if they were one run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from bench.measure.cells import Settings
from rundir.contract import SOURCE_IMPORTED, RunInfo
from rundir.words import context_label

# Flags that describe a new run's metadata: a resumed run keeps R's run.yaml.
NEW_RUN_ONLY = {"run_card": "--run-card", "launch_command": "--launch-command"}


class FlagConflict(ValueError):
    """A flag contradicts R's run.yaml; the message is one line naming both."""


@dataclass
class Resumed:
    """The resumed session's plan inputs."""

    settings: Settings
    contexts: list[int | str]
    concurrency: list[int]
    prefill_contexts: list[int | str]
    kv_budget: int | None  # None: R has none, use what the server says
    kv_source: str | None
    model: str | None


def resumed_inputs(run_dir: Path, old: RunInfo, given: dict[str, object],
                   settings: Settings) -> Resumed:
    """Merge R's parameters with the flags the user gave (`given`: option
    name -> parsed value, only options set on the command line)."""
    where = Path(run_dir) / "run.yaml"
    if old.source == SOURCE_IMPORTED:
        raise FlagConflict(f"--resume: {run_dir} is an imported run (published figures only): "
                           "there is nothing to measure in it")
    for name, flag in NEW_RUN_ONLY.items():
        if given.get(name) is not None:
            raise FlagConflict(f"{flag}: a resumed run keeps {where} as it is; edit that file "
                               f"instead, or start a new run with --out")
    p = old.parameters
    need = {"duration_s": p.duration_s, "max_output_tokens": p.max_output_tokens,
            "prefill_repeats": p.prefill_repeats}
    for field, value in need.items():
        if value is None:
            raise FlagConflict(f"--resume: {where}: field parameters.{field}: missing, "
                               "so the run cannot be continued comparably")
    if not p.contexts or not p.concurrency:
        raise FlagConflict(f"--resume: {where}: field parameters.contexts/concurrency: empty, "
                           "so there is no matrix to continue")
    _same("--duration", given.get("duration"), p.duration_s, where, "s windows")
    _same("--max-output", given.get("max_output"), p.max_output_tokens, where, "output tokens")
    _same("--prefill-repeats", given.get("prefill_repeats"), p.prefill_repeats, where, "repeats")
    _same("--repeats", given.get("repeats"), p.repeats or 1, where, "windows per decode cell")
    _same("--kv-budget", given.get("kv_budget"), old.kv_budget.tokens, where, "KV tokens")
    _same("--model", given.get("model"), old.model.served_name, where, "")
    if given.get("no_prefill") and p.prefill_contexts:
        labels = ", ".join(context_label(c) for c in p.prefill_contexts)
        raise FlagConflict(f"--no-prefill: {where} plans prefill cells at {labels}; a resumed run "
                           "keeps its plan (drop the flag, or start a new run with --out)")
    contexts = _union(p.contexts, given.get("contexts"))
    concurrency = sorted({*p.concurrency, *(given.get("concurrency") or [])})
    prefill: list[int | str] = list(p.prefill_contexts)
    if given.get("prefill_contexts"):
        prefill = _union(prefill, given["prefill_contexts"])
    elif p.prefill_contexts and given.get("contexts"):
        prefill = _union(prefill, given["contexts"])  # prefill follows the decode contexts
    s = dataclasses.replace(settings, duration_s=float(p.duration_s),
                            max_output=int(p.max_output_tokens),
                            prefill_repeats=int(p.prefill_repeats), repeats=p.repeats or 1)
    kv_budget, kv_source = old.kv_budget.tokens, old.kv_budget.source
    if kv_budget is None and given.get("kv_budget") is not None:  # R had none: recorded now
        kv_budget, kv_source = int(given["kv_budget"]), "--kv-budget"
    return Resumed(s, contexts, concurrency, prefill, kv_budget, kv_source,
                   old.model.served_name)


def _same(flag: str, value: object, stored: object, where: Path, unit: str) -> None:
    if value is None or stored is None or value == stored:
        return
    shown = f"{stored:g}" if isinstance(stored, float) else repr(stored) if not unit else stored
    raise FlagConflict(
        f"{flag}: {where} was measured with {shown}{' ' + unit if unit else ''}; a resumed run "
        "keeps it, since cells measured otherwise are not comparable (drop the flag, or start "
        "a new run with --out)"
    )


def _union(old: list, new: list | None) -> list:
    out = list(old)
    for value in new or []:
        if value not in out:
            out.append(value)
    return out
