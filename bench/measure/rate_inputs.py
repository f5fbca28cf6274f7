"""Rate cells' prompts at mixed lengths (`--input-lengths`; rundir/lengths.py).

Why apart from rate_cells.py: a mix gives every request its own prompt length, so a
cell's bodies cannot be one base retagged; each request's prompt is sized on its own
(PromptFactory.build, with /tokenize where the server has it), all of them before the
window and off the event loop, so the send loop only copies ready bytes.

The cell's context is every prompt's upper bound: a drawn length is a fraction of it,
and a `file` prompt (its --prompts item's own length, the item the request's tag
starts at) is cut to it when the item is longer.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.core.plan import Cell
from bench.workload.prompts import Prompt, PromptFactory
from rundir.lengths import INPUT_FILE, InputMix


def input_targets(prompts: PromptFactory, cell: Cell, tags: Sequence[str], mix: InputMix,
                  seed: int) -> list[int]:
    """Prompt length (tokens) of each request of `cell` (request i tagged tags[i]):
    drawn (seeded per cell key and index), or its file item's, capped at the context.
    Blocking (a file's items are counted by the server)."""
    if mix.drawn:
        return [mix.draw(seed, cell.key, cell.context, i) for i in range(len(tags))]
    if mix.kind != INPUT_FILE or prompts.source is None:
        raise ValueError(f"input lengths {mix}: nothing to build rate prompts from")
    source, known = prompts.source, {}
    out = []
    for tag in tags:
        item = source.index_for(tag)
        if item not in known:
            known[item] = prompts.tokens_of(f"[{prompts.run_tag} {tag}] " + source.prompt(item).strip(),
                                            cell.context)
        out.append(min(cell.context, known[item]))
    return out


def input_prompts(prompts: PromptFactory, cell: Cell, tags: Sequence[str], mix: InputMix,
                  seed: int) -> list[tuple[Prompt, int]]:
    """Each request's prompt, built to its length, with that length. Blocking."""
    return [(prompts.build(target, tag), target)
            for tag, target in zip(tags, input_targets(prompts, cell, tags, mix, seed), strict=True)]
