"""The run's length mix, EOS and sampling settings: checked before anything is
measured, recorded in run.yaml, and held to on --resume.

Why apart: these flags (--output-lengths, --length-seed, --honor-eos,
--temperature, --top-p) each add a run.yaml parameter written only when it is not
the default, so every run without them stays byte for byte what it was, and a
resumed run takes run.yaml's values and refuses another one in one line (cells
asked for other lengths or sampled otherwise are not comparable).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bench.core.errors import FlagError
from bench.measure.cells import Settings
from rundir.arrivals import seed_from_text
from rundir.contract import Parameters
from rundir.lengths import INPUT_FILE, OUTPUT_FILE, parse_input_mix, parse_mix

RunOptions = Any  # bench/run/runner.py's (it imports this module: no import back)

# run.yaml's name -> (the Settings field, the flag)
LENGTH_SETTINGS: dict[str, tuple[str, str]] = {
    "output_lengths": ("output_lengths", "--output-lengths"),
    "input_lengths": ("input_lengths", "--input-lengths"),
    "length_seed": ("length_seed", "--length-seed"),
    "honor_eos": ("honor_eos", "--honor-eos"),
    "temperature": ("temperature", "--temperature"),
    "top_p": ("top_p", "--top-p"),
}


def _given(opts: RunOptions, field: str) -> bool:
    value = opts.given.get(field)
    return value is not None and value is not False


def check_length_flags(opts: RunOptions) -> RunOptions:
    """`opts` with a mix's longest request as the rate cells' output (what their plan and
    run.yaml's rate_output_tokens count with); one line for a mix that cannot run: longer
    than --max-output (the plan fits every context with it), with --rate-output (the mix
    sets the rate cells' lengths too), or a seed with nothing to draw."""
    s: Settings = opts.settings
    mix = parse_mix(s.output_lengths)
    if opts.resume is not None:  # run.yaml's hold (check_resumed_lengths)
        return opts
    inputs = check_input_flags(opts)
    if mix.fixed:
        if _given(opts, "length_seed") and not inputs.drawn:
            raise FlagError("--length-seed: only with --output-lengths uniform:… or normal:… or a "
                            "drawn --input-lengths (fixed lengths draw nothing)")
        return opts
    if mix.kind == OUTPUT_FILE:
        cap = _check_output_file(opts, inputs)
        return dataclasses.replace(opts, rate_output=cap) if opts.rate else opts
    if mix.high > s.max_output:
        raise FlagError(f"--output-lengths {mix}: its longest request ({mix.high} tokens) exceeds "
                        f"--max-output {s.max_output} (the plan fits each context with that many)")
    if opts.rate_output is not None:
        raise FlagError(f"--rate-output with --output-lengths {mix}: give one (the mix sets the "
                        "rate cells' lengths too)")
    return dataclasses.replace(opts, rate_output=mix.high) if opts.rate else opts


def _check_output_file(opts: RunOptions, inputs) -> int:
    """--output-lengths file's rate output for the plan: the cap, --max-output (no request asks
    more); one line where it cannot run: without --prompts, with a seed (nothing is drawn),
    --rate-output, --rate-reuse (a reuse request's prompt is two items' text) or --shard."""
    flag = "--output-lengths file"
    if opts.prompts_file is None:
        raise FlagError(f"{flag}: only with --prompts FILE (each request asks its item's reply length)")
    if _given(opts, "length_seed") and not inputs.drawn:
        raise FlagError("--length-seed: only with --output-lengths uniform:… or normal:… or a "
                        f"drawn --input-lengths ({flag} draws nothing)")
    if opts.rate_output is not None:
        raise FlagError(f"--rate-output with {flag}: give one (each rate request asks its item's "
                        "reply length)")
    if opts.rate_reuse:
        raise FlagError(f"{flag} with --rate-reuse: give one (a reuse request's prompt is a shared "
                        "prefix and a suffix, not one item)")
    if opts.shard is not None:
        raise FlagError(f"{flag} with --shard: reply lengths are counted in one process")
    return opts.settings.max_output


def check_input_flags(opts: RunOptions):
    """The run's input mix (rundir.lengths.InputMix); one line where it cannot run: without
    rate cells (decode and prefill cells keep their exact contexts), `file` without a
    --prompts file, with --rate-reuse (shared prefixes are cut from the context), or with
    --shard (a mix's prompts are built and sent in one process)."""
    inputs = parse_input_mix(opts.settings.input_lengths)
    if inputs.fixed:
        return inputs
    flag = f"--input-lengths {inputs}"
    if not opts.rate:
        raise FlagError(f"{flag}: only with --rate (decode and prefill cells keep their exact contexts)")
    if inputs.kind == INPUT_FILE and opts.prompts_file is None:
        raise FlagError(f"{flag}: only with --prompts FILE (each prompt at its file item's own length)")
    if opts.rate_reuse:
        raise FlagError(f"{flag} with --rate-reuse: give one (a reuse cell's shared prefixes are cut "
                        "from the cell's exact context)")
    if opts.shard is not None:
        raise FlagError(f"{flag} with --shard: a rate cell with an input mix is sent from one process")
    return inputs


def length_parameters(s: Settings, run_id: str, seed_given: bool) -> dict[str, object]:
    """run.yaml's length and sampling fields for a new run: all None at the defaults.
    The seed is recorded (given, or derived from `run_id`) whenever lengths are drawn."""
    mix = parse_mix(s.output_lengths)
    inputs = parse_input_mix(s.input_lengths)
    seed = None
    if mix.drawn or inputs.drawn:
        seed = s.length_seed if seed_given else seed_from_text("lengths:" + run_id)
    return {"output_lengths": None if mix.fixed else str(mix),
            "input_lengths": None if inputs.fixed else str(inputs), "length_seed": seed,
            "honor_eos": True if s.honor_eos else None, "temperature": s.temperature,
            "top_p": s.top_p}


def run_settings(s: Settings, p: Parameters) -> Settings:
    """The settings the cells run with: run.yaml's length and sampling fields (a new
    run's just recorded, or a resumed run's)."""
    return dataclasses.replace(
        s, output_lengths=p.output_lengths or "fixed", input_lengths=p.input_lengths or "fixed",
        length_seed=p.length_seed or 0,
        honor_eos=bool(p.honor_eos), temperature=p.temperature, top_p=p.top_p)


def check_resumed_lengths(opts: RunOptions, p: Parameters, run_dir: Path) -> None:
    """Refuse a resumed run given another length mix, seed, EOS or sampling setting
    than run.yaml's, in one line."""
    s: Settings = opts.settings
    stored_mix = p.output_lengths or "fixed"
    stored_inputs = p.input_lengths or "fixed"
    try:
        parse_mix(stored_mix, "parameters.output_lengths")
        parse_input_mix(stored_inputs, "parameters.input_lengths")
    except ValueError as exc:
        raise FlagError(f"--resume: {run_dir / 'run.yaml'}: {exc}") from None
    stored = {"output_lengths": stored_mix, "input_lengths": stored_inputs, "length_seed": p.length_seed,
              "honor_eos": bool(p.honor_eos), "temperature": p.temperature, "top_p": p.top_p}
    shown = {"output_lengths": stored_mix, "input_lengths": stored_inputs,
             "honor_eos": "EOS honoured" if p.honor_eos else "EOS ignored (the engine profile's)",
             "temperature": "server default",
             "top_p": "server default", "length_seed": "no drawn lengths"}
    for name, (field, flag) in LENGTH_SETTINGS.items():
        if not _given(opts, field):
            continue
        asked = getattr(s, field)
        if name == "output_lengths":
            asked = str(parse_mix(asked))
        elif name == "input_lengths":
            asked = str(parse_input_mix(asked))
        if asked != stored[name]:
            had = shown[name] if stored[name] is None or stored[name] is False else stored[name]
            raise FlagError(f"{flag}: {run_dir} was measured with {_text(had)}; got {_text(asked)} "
                            "(start a new run with --out)")


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def length_lines(s: Settings) -> list[str]:
    """What the plan says of the run's lengths, EOS and sampling; none at the defaults,
    so a run without these flags shows what it did."""
    mix = parse_mix(s.output_lengths)
    out = []
    if mix.kind == OUTPUT_FILE:
        out.append(f"Output lengths: each decode and rate request asks its --prompts item's reply length, "
                   f"at most {s.max_output} tokens (kept in output_target); prefill cells ask 1 token")
    elif not mix.fixed:
        out.append(f"Output lengths: {mix}, drawn per request (seeded; kept in output_target); "
                   "prefill cells ask 1 token")
    inputs = parse_input_mix(s.input_lengths)
    if inputs.drawn:
        out.append(f"Input lengths: {inputs} of each rate cell's context, drawn per request (seeded; "
                   "kept in input_target); the context is the longest prompt")
    elif not inputs.fixed:
        out.append("Input lengths: each rate request's prompt at its --prompts item's own length, "
                   "capped at the cell's context (kept in input_target)")
    if s.honor_eos:
        out.append("EOS honoured (--honor-eos): requests may end before their max_tokens")
    if s.temperature is not None or s.top_p is not None:
        out.append("Sampling: " + sampling_text(s.temperature, s.top_p))
    return out


def sampling_text(temperature: float | None, top_p: float | None) -> str:
    """"temperature 0, top_p server default": what each request was sent."""
    def one(v: float | None) -> str:
        return "server default" if v is None else f"{v:g}"
    return f"temperature {one(temperature)}, top_p {one(top_p)}"
