"""Length mixes (`--output-lengths`): how many tokens each request asks for.

Why here, beside rundir/arrivals.py: a run records its spec and seed in run.yaml
and each request's asked max_tokens in requests.parquet's `output_target`, and a
reader must be able to compute every request's length again from those alone, so
the draw is pure and lives with the contract. `fixed` is the matrix's own: every
request asks the cell's maximum (nothing is drawn, nothing recorded).

A draw is seeded per (run seed, cell key, request index): decode cells index a
request by its stream slot and its place in that slot's closed loop (slot s's
n-th request, counting from 0), rate cells by the request's index in the
schedule (slot 0). The draw does not depend on the host's speed: a slot's n-th
request always asks the same length, however many requests the window held.

Input mixes (`--input-lengths`, rate cells only) are fractions of the cell's context,
so one spec serves every context of the matrix and the cell's context stays its upper
bound (every prompt ≤ it: capacity planned at the context stays safe). A request's
input draw is keyed by the cell key plus "input", so it is independent of its output
draw. `file` draws nothing: each prompt is its file item's own length (capped at the
context), which the collector measures, not this module.

An output mix `file` draws nothing either: with --prompts, each request asks the length of
the reply that follows its prompt's item in the file (capped at the run's max output),
which the collector counts with the server's tokenizer; items without a reply are left out
of the run's pool of prompts (bench/workload/sources.py, PromptSource.index_for).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass

FIXED = "fixed"
UNIFORM = "uniform"
NORMAL = "normal"
NORMAL_TRIES = 64  # a normal draw outside [MIN, MAX] is drawn again this often, then clamped

_INT = r"\s*([0-9]+)\s*"
_NUM = r"\s*([0-9]+(?:\.[0-9]+)?)\s*"
OUTPUT_FILE = "file"
SPEC_HELP = ("fixed, uniform:A-B or normal:MEAN,SD,MIN,MAX (whole tokens ≥ 1), or file (each request "
             "its --prompts item's reply length)")


@dataclass(frozen=True)
class LengthMix:
    """A parsed length spec: `kind` FIXED, UNIFORM (low..high), NORMAL (mean, sd,
    bounded to low..high) or OUTPUT_FILE (each request its prompt item's reply length)."""

    kind: str = FIXED
    low: int = 0
    high: int = 0
    mean: float = 0.0
    sd: float = 0.0

    @property
    def fixed(self) -> bool:
        return self.kind == FIXED

    @property
    def drawn(self) -> bool:
        """Whether lengths are drawn (and seeded): uniform or normal."""
        return self.kind in (UNIFORM, NORMAL)

    def __str__(self) -> str:
        """The spec as run.yaml records it (parse_mix reads it back)."""
        if self.kind == UNIFORM:
            return f"{UNIFORM}:{self.low}-{self.high}"
        if self.kind == NORMAL:
            return f"{NORMAL}:{_num(self.mean)},{_num(self.sd)},{self.low},{self.high}"
        return self.kind

    def draw(self, seed: int, cell_key: tuple, slot: int, n: int) -> int:
        """The length request `n` of slot `slot` of the cell keyed `cell_key` asks
        (a fixed mix has none to draw: ValueError)."""
        if self.fixed:
            raise ValueError("a fixed length mix draws nothing: every request asks the cell's maximum")
        if not self.drawn:
            raise ValueError(f"output lengths {self}: nothing to draw (each request its item's reply)")
        rng = random.Random(request_seed(seed, cell_key, slot, n))
        if self.kind == UNIFORM:
            return rng.randint(self.low, self.high)
        for _ in range(NORMAL_TRIES):
            value = round(rng.gauss(self.mean, self.sd))
            if self.low <= value <= self.high:
                return value
        return min(self.high, max(self.low, round(self.mean)))


INPUT_FILE = "file"
_FRAC = r"\s*([0-9]*\.?[0-9]+)\s*"
INPUT_HELP = ("fixed, uniform:A-B or normal:MEAN,SD,MIN,MAX (fractions of the cell's context, "
              "0 < x ≤ 1), or file (each prompt its --prompts item's own length)")


@dataclass(frozen=True)
class InputMix:
    """A parsed input length spec: `kind` FIXED (every prompt at the context), UNIFORM or
    NORMAL (fractions of the context, bounded to low..high), or INPUT_FILE."""

    kind: str = FIXED
    low: float = 0.0
    high: float = 0.0
    mean: float = 0.0
    sd: float = 0.0

    @property
    def fixed(self) -> bool:
        return self.kind == FIXED

    @property
    def drawn(self) -> bool:
        """Whether lengths are drawn (and seeded): uniform or normal."""
        return self.kind in (UNIFORM, NORMAL)

    def __str__(self) -> str:
        """The spec as run.yaml records it (parse_input_mix reads it back)."""
        if self.kind == UNIFORM:
            return f"{UNIFORM}:{_num(self.low)}-{_num(self.high)}"
        if self.kind == NORMAL:
            return f"{NORMAL}:{_num(self.mean)},{_num(self.sd)},{_num(self.low)},{_num(self.high)}"
        return self.kind

    def at(self, context: int) -> LengthMix:
        """The mix in tokens at `context`: bounds rounded, never below 1 nor above it."""
        if not self.drawn:
            raise ValueError(f"input lengths {self}: nothing to draw")
        low = min(context, max(1, round(self.low * context)))
        high = min(context, max(low, round(self.high * context)))
        if self.kind == UNIFORM:
            return LengthMix(UNIFORM, low, high)
        mean = min(high, max(low, self.mean * context))
        return LengthMix(NORMAL, low, high, mean, max(self.sd * context, 1e-9))

    def draw(self, seed: int, cell_key: tuple, context: int, n: int) -> int:
        """The prompt length (tokens) of request `n` of the rate cell keyed `cell_key`."""
        return self.at(context).draw(seed, (*cell_key, "input"), 0, n)


def parse_input_mix(text: str, flag: str = "--input-lengths") -> InputMix:
    """An input spec, or ValueError naming `flag` and what was expected, in one line."""
    raw = str(text).strip()
    kind, _, rest = raw.partition(":")
    kind = kind.strip().lower()
    if kind in (FIXED, INPUT_FILE) and not rest:
        return InputMix(kind)
    if kind == UNIFORM:
        m = re.fullmatch(_FRAC + "-" + _FRAC, rest)
        if not m:
            raise ValueError(f"{flag} {raw}: expected uniform:A-B with fractions of the context, "
                             "e.g. uniform:0.25-1")
        low, high = float(m[1]), float(m[2])
        if not 0 < low <= high <= 1:
            raise ValueError(f"{flag} {raw}: expected fractions 0 < A ≤ B ≤ 1 of the context")
        return InputMix(UNIFORM, low, high)
    if kind == NORMAL:
        m = re.fullmatch(_FRAC + "," + _FRAC + "," + _FRAC + "," + _FRAC, rest)
        if not m:
            raise ValueError(f"{flag} {raw}: expected normal:MEAN,SD,MIN,MAX as fractions of the "
                             "context, e.g. normal:0.5,0.2,0.1,1")
        mean, sd, low, high = (float(m[i]) for i in range(1, 5))
        if not 0 < low <= mean <= high <= 1 or sd <= 0:
            raise ValueError(f"{flag} {raw}: expected SD > 0 and 0 < MIN ≤ MEAN ≤ MAX ≤ 1")
        return InputMix(NORMAL, low, high, mean, sd)
    raise ValueError(f"{flag}: expected {INPUT_HELP}, got {raw!r}")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def request_seed(seed: int, cell_key: tuple, slot: int, n: int) -> int:
    """The seed of one request's draw: stable across processes and Python versions."""
    text = f"{seed}|{'|'.join('' if k is None else str(k) for k in cell_key)}|{slot}|{n}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def parse_mix(text: str, flag: str = "--output-lengths") -> LengthMix:
    """A spec, or ValueError naming `flag` and what was expected, in one line."""
    raw = str(text).strip()
    kind, _, rest = raw.partition(":")
    kind = kind.strip().lower()
    if kind == FIXED and not rest:
        return LengthMix()
    if kind == OUTPUT_FILE and not rest:
        return LengthMix(OUTPUT_FILE)
    if kind == UNIFORM:
        m = re.fullmatch(_INT + "-" + _INT, rest)
        if not m:
            raise ValueError(f"{flag} {raw}: expected uniform:A-B with whole tokens A and B, "
                             "e.g. uniform:100-200")
        low, high = int(m[1]), int(m[2])
        if not 1 <= low <= high:
            raise ValueError(f"{flag} {raw}: expected A-B with 1 ≤ A ≤ B")
        return LengthMix(UNIFORM, low, high)
    if kind == NORMAL:
        m = re.fullmatch(_NUM + "," + _NUM + "," + _INT + "," + _INT, rest)
        if not m:
            raise ValueError(f"{flag} {raw}: expected normal:MEAN,SD,MIN,MAX, e.g. normal:300,100,50,1000")
        mean, sd, low, high = float(m[1]), float(m[2]), int(m[3]), int(m[4])
        if not (math.isfinite(mean) and math.isfinite(sd)) or not 1 <= low <= mean <= high or sd <= 0:
            raise ValueError(f"{flag} {raw}: expected SD > 0 and 1 ≤ MIN ≤ MEAN ≤ MAX")
        return LengthMix(NORMAL, low, high, mean, sd)
    raise ValueError(f"{flag}: expected {SPEC_HELP}, got {raw!r}")
