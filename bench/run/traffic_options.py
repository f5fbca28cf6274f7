"""The traffic and rate flags against run.yaml: their checks, their record, and a
resumed run's settings.

Why apart from bench/run/runner.py: these flags (--prefix-reuse, --turns,
--traffic-concurrency, --rate and the settings its cells share) each add a
field to run.yaml's parameters that is written only when a run has such cells,
and the rate settings hold for the whole run, so a resumed run takes run.yaml's
and refuses another value. Kept together, a new flag of this kind is one
entry in each table here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol, TypeVar

from bench.core.errors import FlagError
from bench.core.plan import rate_output
from rundir.arrivals import seed_from_text
from rundir.contract import TRAFFIC_PARAMETERS, Parameters, RunInfo

# The rate flags one value of which holds for the whole run (run.yaml's, on --resume):
# run.yaml's name -> (the RunOptions field, the flag).
RATE_SETTINGS: dict[str, tuple[str, str]] = {
    "arrivals": ("arrivals", "--arrivals"),
    "arrival_seed": ("arrival_seed", "--arrival-seed"),
    "rate_cap": ("rate_cap", "--rate-cap"),
    "rate_output_tokens": ("rate_output", "--rate-output"),
    "rate_reuse": ("rate_reuse", "--rate-reuse"),
}


class _Settings(Protocol):
    max_output: int


class TrafficFlags(Protocol):
    """The fields of bench.run.runner.RunOptions read here."""

    prefix_reuse: list[int] | None
    turns: list[int] | None
    traffic_concurrency: list[int] | None
    rate: list[float] | None
    arrivals: str
    arrival_seed: int | None
    rate_cap: int | None
    rate_output: int | None
    rate_reuse: list[int] | None
    settings: _Settings
    given: dict[str, object]
    resume: Path | None


Opts = TypeVar("Opts", bound=TrafficFlags)


def check_rate_flags(opts: TrafficFlags) -> None:
    """A rate setting needs rate cells to set (a resumed run may have them in run.yaml)."""
    alone = [flag for field, flag in RATE_SETTINGS.values() if opts.given.get(field) is not None]
    if alone and not opts.rate and opts.resume is None:
        raise FlagError(f"{alone[0]}: only with --rate (it sets the rate cells, and there are none)")


def traffic_parameters(opts: TrafficFlags, run_id: str) -> dict[str, object]:
    """run.yaml's record of the traffic flags: none without --prefix-reuse, --turns or
    --rate. The rate cells' seed is recorded even when derived (from `run_id`), so a
    run's schedules can be computed again."""
    out: dict[str, object] = dict.fromkeys(TRAFFIC_PARAMETERS)
    if opts.prefix_reuse or opts.turns:
        out.update(prefix_reuse=opts.prefix_reuse or None, turns=opts.turns or None,
                   traffic_concurrency=sorted(set(opts.traffic_concurrency or [1])))
    if opts.rate:
        seed = opts.arrival_seed if opts.arrival_seed is not None else seed_from_text(run_id)
        out.update(rate=sorted(set(opts.rate)), arrivals=opts.arrivals, arrival_seed=seed,
                   rate_cap=opts.rate_cap,
                   rate_output_tokens=rate_output(opts.settings.max_output, opts.rate_output),
                   rate_reuse=sorted(set(opts.rate_reuse)) if opts.rate_reuse else None)
    return out


def rate_settings(opts: Opts, old: RunInfo, run_dir: Path) -> Opts:
    """`opts` with run.yaml's rate settings where it has them; a flag given again
    with another value is refused (a run's rate cells share one process, seed, cap
    and output length)."""
    p = old.parameters
    for name, (option, flag) in RATE_SETTINGS.items():
        stored, asked = getattr(p, name), getattr(opts, option)
        if name == "rate_reuse" and p.rate:  # absent is a value too: unique prompts
            asked = sorted(set(asked)) if asked else None
            if opts.given.get(option) is not None and asked != stored:
                had = ",".join(map(str, stored)) if stored else "no --rate-reuse (unique prompts)"
                raise FlagError(f"{flag}: {run_dir} measured its rate cells with {had}; got "
                                f"{','.join(map(str, asked or []))} (start a new run with --out)")
            continue
        if opts.given.get(option) is not None and stored is not None and asked != stored:
            raise FlagError(f"{flag}: {run_dir} measured its rate cells with {stored}; "
                            f"got {asked} (start a new run with --out)")
    if not p.rate:
        return opts
    return dataclasses.replace(
        opts, arrivals=p.arrivals or opts.arrivals, arrival_seed=p.arrival_seed,
        rate_cap=p.rate_cap if p.rate_cap is not None else None,
        rate_output=p.rate_output_tokens, rate_reuse=p.rate_reuse)


def merge_traffic_parameters(p: Parameters, opts: TrafficFlags, run_id: str) -> None:
    """A resumed run's run.yaml parameters with the traffic flags given again: their
    lists grow (new cells), a rate setting is set where run.yaml had none."""
    values: dict[str, Any]
    for name, values in traffic_parameters(opts, run_id).items():
        if name in RATE_SETTINGS:
            if getattr(p, name) is None:
                setattr(p, name, values)
        elif values:
            setattr(p, name, sorted({*(getattr(p, name) or []), *values}))
