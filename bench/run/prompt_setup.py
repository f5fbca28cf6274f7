"""The run's prompt source: checked before anything is measured, recorded in run.yaml,
and held to on --resume.

A filler run records nothing (its run.yaml is what it was before sources existed). Any
other records `prompt_source` ("natural", "adversarial", "file:NAME"), `prompt_seed` (given,
or derived from the run id as the arrival seed is) and, for a file, its SHA-256: a resumed
run must name the same source, seed and file bytes, or it is refused in one line.
Traffic cells (--prefix-reuse, --turns) and rate cells at a reuse level (--rate-reuse)
take their text from the source too; --turns with a file needs assistant turns in it
(the replies a conversation replays), or it is refused. With --output-lengths file the
run's prompts start only at the file's items that have a reply (the others are skipped,
and the run says how many; their text may still pad a prompt); a file with none is refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bench.core.errors import FlagError
from bench.workload.prompt_files import PromptFile, PromptFileError, read_prompt_file, replied_items
from bench.workload.sources import FILLER, PromptSource
from rundir.arrivals import seed_from_text
from rundir.contract import Parameters
from rundir.lengths import OUTPUT_FILE, parse_mix

# `opts` below is the runner's RunOptions (bench/run/runner.py imports this module, so it
# is not imported here: tests/project/test_layers.py counts a TYPE_CHECKING import as a cycle)
RunOptions = Any

FILE_PREFIX = "file:"


def check_prompt_flags(opts: RunOptions) -> RunOptions:
    """`opts` (RunOptions) with --prompts read and checked whole; FlagError: one line."""
    given = opts.given
    if opts.prompts_file is not None and given.get("prompt_source") is not None:
        raise FlagError(f"--prompt-source {opts.prompt_source} and --prompts: give one (--prompts "
                        "FILE is the source)")
    if given.get("prompt_seed") is not None and opts.prompt_source == FILLER \
            and opts.prompts_file is None and opts.resume is None:
        raise FlagError("--prompt-seed: only with --prompt-source natural|adversarial or --prompts "
                        "(filler prompts are seeded by their tags)")
    if opts.prompts_file is None:
        return opts
    try:
        pf = read_prompt_file(Path(opts.prompts_file))
    except PromptFileError as exc:
        raise FlagError(f"--prompts: {exc}") from None
    if opts.resume is None and parse_mix(opts.settings.output_lengths).kind == OUTPUT_FILE:
        reply_pool(pf)  # refused before the server if no item has a reply
    if opts.turns and not _has_replies(pf):
        raise FlagError(f"--prompts {pf.name} with --turns: the file has no assistant (gpt) turns to "
                        "replay as a conversation's replies; expected ShareGPT or chat messages with them")
    return dataclasses.replace(opts, prompt_file=pf)


def _has_replies(pf: PromptFile) -> bool:
    return PromptSource(FILE_PREFIX + pf.name, 0, pf.prompts, pf.dialogues).has_replies


def reply_pool(pf: PromptFile) -> tuple[int, ...]:
    """The items of `pf` that have a reply (--output-lengths file); FlagError if none has."""
    try:
        return replied_items(pf)
    except PromptFileError as exc:
        raise FlagError(f"--prompts with --output-lengths file: {exc}") from None


def reply_line(pf: PromptFile) -> str:
    """What the run says of its prompts with --output-lengths file: items kept and skipped."""
    kept, total = len(reply_pool(pf)), len(pf.prompts)
    skipped = f"; the {total - kept} without one skipped" if kept < total else ""
    return (f"--prompts {pf.name}: {kept} of {total} items have a reply; each decode and rate request "
            f"starts at one of them and asks its reply length{skipped}")


def prompt_parameters(opts: RunOptions, run_id: str) -> dict[str, object]:
    """run.yaml's prompt fields for a new run: all None for filler."""
    pf: PromptFile | None = opts.prompt_file
    if pf is None and opts.prompt_source == FILLER:
        return {"prompt_source": None, "prompt_seed": None, "prompt_file_sha256": None}
    seed = opts.prompt_seed if opts.prompt_seed is not None else seed_from_text(run_id)
    return {"prompt_source": FILE_PREFIX + pf.name if pf else opts.prompt_source,
            "prompt_seed": seed, "prompt_file_sha256": pf.sha256 if pf else None}


def check_resumed_source(opts: RunOptions, p: Parameters, run_dir: Path) -> None:
    """Refuse a resumed run given another source, seed or file than run.yaml's (one line);
    a run measured from a file needs that file given again."""
    pf: PromptFile | None = opts.prompt_file
    asked = FILE_PREFIX + pf.name if pf else (
        opts.prompt_source if opts.given.get("prompt_source") is not None else None)
    stored = p.prompt_source or FILLER
    if asked is not None and not (pf and stored.startswith(FILE_PREFIX)) and asked != stored:
        flag = "--prompts" if pf else "--prompt-source"
        raise FlagError(f"{flag}: {run_dir} was measured with prompt source {stored}; got {asked} "
                        "(start a new run with --out)")
    if pf is not None and stored.startswith(FILE_PREFIX) and pf.sha256 != p.prompt_file_sha256:
        raise FlagError(f"--prompts: {pf.name} is not the file {run_dir} was measured with "
                        f"({stored}, sha256 {str(p.prompt_file_sha256)[:12]}…; got {pf.sha256[:12]}…)")
    if pf is None and stored.startswith(FILE_PREFIX):
        raise FlagError(f"--resume: {run_dir} was measured with prompts from {stored[len(FILE_PREFIX):]}; "
                        "give that file again with --prompts")
    seed = opts.prompt_seed if opts.given.get("prompt_seed") is not None else None
    if seed is not None and seed != p.prompt_seed:
        had = f"prompt seed {p.prompt_seed}" if p.prompt_seed is not None else "filler prompts (no seed)"
        raise FlagError(f"--prompt-seed: {run_dir} was measured with {had}; got {seed} "
                        "(start a new run with --out)")


def source_of(p: Parameters, prompt_file: PromptFile | None) -> PromptSource | None:
    """The run's source from run.yaml's fields (None: filler)."""
    if p.prompt_source is None:
        return None
    seed = p.prompt_seed or 0
    if p.prompt_source.startswith(FILE_PREFIX):
        if prompt_file is None:  # check_resumed_source refused it already
            raise FlagError(f"--prompts: the run's prompts come from {p.prompt_source}; give that file")
        if p.output_lengths == OUTPUT_FILE:
            reply_pool(prompt_file)  # one line if no item has a reply
            return PromptSource(p.prompt_source, seed, prompt_file.prompts, prompt_file.dialogues,
                                prompt_file.replies)
        return PromptSource(p.prompt_source, seed, prompt_file.prompts, prompt_file.dialogues)
    return PromptSource(p.prompt_source, seed)
