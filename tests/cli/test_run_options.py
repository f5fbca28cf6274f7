"""`bench run`'s options come from one declaration (bench/options.py).

Each option is declared once and both the click options and the RunOptions a
run gets are made from it: every declared option is in --help, every field a
user can set has exactly one option, a command line reaches RunOptions
field by field through the real `bench run`, and an option added to a copy
of the list flows from the command line to its field with nothing else written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import bench.cli
from bench.measure.cells import Settings
from bench.options import (
    FIELD_DEFAULT,
    NOT_FLAGS,
    RUN_OPTIONS,
    SETTINGS,
    RunOption,
    build_run_options,
    check_options,
    field_default,
    run_options,
)
from bench.params import Seconds
from bench.run.runcard import RunCard
from bench.run.runner import RunOptions

URL = "http://127.0.0.1:9"


def _captured(monkeypatch, args: list[str]) -> RunOptions:
    """The RunOptions the real `bench run` hands the run for `args` (nothing measured)."""
    got: list[RunOptions] = []
    monkeypatch.setattr(bench.cli, "run_benchmark", lambda opts, progress: got.append(opts))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    res = CliRunner().invoke(bench.cli.main, ["run", *args])
    assert res.exit_code == 0, res.output
    (opts,) = got
    return opts


def _field(opts: Any, name: str) -> Any:
    if name.startswith(SETTINGS):
        return getattr(opts.settings, name[len(SETTINGS):])
    return getattr(opts, name)


def test_every_declared_option_is_in_help_with_its_help_text() -> None:
    res = CliRunner().invoke(bench.cli.main, ["run", "--help"], terminal_width=400)
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    for opt in RUN_OPTIONS:
        assert opt.flag in text
        if opt.help:
            assert " ".join(opt.help.split()) in text, opt.flag
        if opt.show_default:
            shown = f"[default: {opt.click_default()}"
            assert f"{shown}]" in text or f"{shown};" in text, opt.flag


def test_every_settable_field_has_exactly_one_option() -> None:
    """A field of RunOptions or Settings that no option sets (and is not listed as
    the command's own) would be a flag forgotten; check_options refuses two."""
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    fields |= {SETTINGS + f.name for f in dataclasses.fields(Settings)}
    declared = [opt.field for opt in RUN_OPTIONS]
    assert len(declared) == len(set(declared))
    assert set(declared) | NOT_FLAGS == fields
    assert not set(declared) & NOT_FLAGS


def test_without_flags_every_field_has_its_own_default(monkeypatch) -> None:
    opts = _captured(monkeypatch, ["--base-url", URL])
    assert opts == RunOptions(base_url=URL, given={"base_url": URL})
    for opt in RUN_OPTIONS:
        if opt.field != "base_url":
            assert _field(opts, opt.field) == field_default(RunOptions, opt.field), opt.flag


# A value other than the default for every option, and what its field holds then.
SAMPLES: dict[str, tuple[list[str], Any]] = {
    "--base-url": ([URL], URL),
    "--api-key": (["k-123"], "k-123"),
    "--model": (["m"], "m"),
    "--contexts": (["8k,max"], [8192, "max"]),
    "--concurrency": (["1,3"], [1, 3]),
    "--prefill-contexts": (["4k"], [4096]),
    "--no-prefill": ([], False),
    "--prefix-reuse": (["90,0"], [0, 90]),
    "--turns": (["8,1"], [1, 8]),
    "--traffic-concurrency": (["4,1"], [1, 4]),
    "--rate": (["4,0.5"], [0.5, 4.0]),
    "--arrivals": (["gamma:4"], "gamma:4"),
    "--arrival-seed": (["0"], 0),
    "--rate-cap": (["8"], 8),
    "--rate-output": (["128"], 128),
    "--rate-reuse": (["90,0"], [0, 90]),
    "--prompt-source": (["natural"], "natural"),
    "--prompts": (["p.jsonl"], Path("p.jsonl")),
    "--prompt-seed": (["5"], 5),
    "--output-lengths": (["uniform:10-20"], "uniform:10-20"),
    "--input-lengths": (["uniform:0.5-1.0"], "uniform:0.5-1"),
    "--length-seed": (["6"], 6),
    "--honor-eos": ([], True),
    "--temperature": (["0"], 0.0),
    "--top-p": (["0.9"], 0.9),
    "--duration": (["7"], 7.0),
    "--repeats": (["3"], 3),
    "--max-output": (["1k"], 1024),
    "--prefill-repeats": (["5"], 5),
    "--warmup-timeout": (["11"], 11.0),
    "--warmup-stable": (["0"], 0.0),
    "--server-wait": (["4"], 4.0),
    "--stall-timeout": (["12"], 12.0),
    "--ttft-timeout": (["13"], 13.0),
    "--kv-budget": (["64k"], 65536),
    "--launch-command": (["vllm serve m"], "vllm serve m"),
    "--run-card": (["CARD"], RunCard(submitter="someone")),
    "--out": (["o"], Path("o")),
    "--resume": (["r"], Path("r")),
    "--retry-errors": ([], True),
    "--gpu-telemetry": (["off"], "off"),
    "--workers": (["2"], 2),
    "--shard": (["0/2"], (0, 2)),
    "--coordinator": (["h:7700"], ("h", 7700)),
    "--join-timeout": (["9"], 9.0),
    "--source-address": (["127.0.0.1"], ("127.0.0.1",)),
    "--dry-run": ([], True),
}


def test_every_option_on_the_command_line_reaches_its_field(monkeypatch, tmp_path) -> None:
    assert set(SAMPLES) == {opt.flag for opt in RUN_OPTIONS}, "a sample for every option"
    card = tmp_path / "card.yaml"
    card.write_text("submitter: someone\n")
    monkeypatch.setenv("BENCH_SHARD_SECRET", "s" * 24)  # --shard wants the secret set
    args = []
    for flag, (values, _) in SAMPLES.items():
        args += [flag, *(str(card) if v == "CARD" else v for v in values)]
    opts = _captured(monkeypatch, args)
    for opt in RUN_OPTIONS:
        assert _field(opts, opt.field) == SAMPLES[opt.flag][1], opt.flag
        assert _field(opts, opt.field) != field_default(RunOptions, opt.field) or opt.required
    assert set(opts.given) == {opt.name for opt in RUN_OPTIONS}  # each compared on --resume


# -- a new option, declared in a copy of the list --------------------------------


@dataclass
class Wider(RunOptions):
    frobs: int = 3
    patience_s: float = 2.5


NEW = (RunOption("--frobs", "frobs", "How many frobs.", type=click.IntRange(1, 9),
                 show_default=True),
       RunOption("--patience", "patience_s", "Patience (s).", type=Seconds(), show_default=True),
       RunOption("--drain", "settings.drain_timeout_s", "Drain (s).", type=Seconds()))


def _command(options: tuple[RunOption, ...], got: list) -> click.Command:
    @click.command()
    @run_options(options, Wider)
    def cmd(**kw: Any) -> None:
        got.append(build_run_options(kw, {}, options, Wider))

    return cmd


def test_an_option_added_to_the_list_flows_end_to_end() -> None:
    options = RUN_OPTIONS + NEW
    got: list[Wider] = []
    cmd = _command(options, got)
    runner = CliRunner()
    help_text = " ".join(runner.invoke(cmd, ["--help"], terminal_width=400).output.split())
    assert "--frobs INTEGER RANGE How many frobs. [default: 3; 1<=x<=9]" in help_text
    assert "--patience SECONDS Patience (s). [default: 2.5]" in help_text
    assert runner.invoke(cmd, ["--base-url", URL]).exit_code == 0
    assert (got[-1].frobs, got[-1].patience_s) == (3, 2.5)
    assert got[-1].settings.drain_timeout_s == Settings().drain_timeout_s
    res = runner.invoke(cmd, ["--base-url", URL, "--frobs", "7", "--patience", "1",
                              "--drain", "4", "--duration", "5"])
    assert res.exit_code == 0, res.output
    assert (got[-1].frobs, got[-1].patience_s) == (7, 1.0)
    assert (got[-1].settings.drain_timeout_s, got[-1].settings.duration_s) == (4.0, 5.0)
    bad = runner.invoke(cmd, ["--base-url", URL, "--frobs", "0"])
    assert bad.exit_code == 2 and "--frobs" in bad.output


def test_an_option_for_a_field_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="--frob: sets frob, which RunOptions has not"):
        check_options([RunOption("--frob", "frob")])
    with pytest.raises(ValueError, match="--warmup: sets settings.warmup, which Settings has not"):
        check_options([RunOption("--warmup", "settings.warmup")])
    with pytest.raises(ValueError, match="a second option for model"):
        check_options([RunOption("--model", "model"), RunOption("--served", "model")])
    assert RunOption("--frobs", "frobs").default is FIELD_DEFAULT
    check_options(NEW, Wider)
