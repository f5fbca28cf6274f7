"""`bench run --help` and `--dry-run` as a first-time user meets them (issue 32, item 9).

The help was 27 options in one flat list, two without a word of help and no
example; `--dry-run` could not print a plan without a live server (a typo'd
port cost the 30 s of --server-wait, then an error instead of a plan).
"""

from __future__ import annotations

import socket

from click.testing import CliRunner

import bench.cli
from bench.options import GROUPS, RUN_OPTIONS
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401


def _help() -> str:
    res = CliRunner().invoke(bench.cli.main, ["run", "--help"], terminal_width=100)
    assert res.exit_code == 0, res.output
    return res.output


def test_every_option_has_help_text_and_a_group() -> None:
    for opt in RUN_OPTIONS:
        assert opt.help and opt.help.strip(), opt.flag
        assert opt.group in GROUPS, opt.flag


def test_help_lists_the_options_in_their_groups_in_order() -> None:
    text = _help()
    heads = [text.index(f"\n{title}:\n") for title in GROUPS]
    assert heads == sorted(heads), "the sections in GROUPS' order"
    bounds = [*heads, text.index("\nOther options:\n")]
    for opt in RUN_OPTIONS:
        i = GROUPS.index(opt.group)
        at = text.index(f"  {opt.flag} ", heads[0])
        assert bounds[i] < at < bounds[i + 1], f"{opt.flag} under {opt.group}"
    assert text.count("--base-url URL") == 1, "each option once"


def test_help_has_examples_and_says_where_a_run_goes() -> None:
    text = " ".join(_help().split())
    assert "Examples:" in text
    assert "bench run --base-url http://127.0.0.1:8000 --dry-run" in text
    assert "--resume runs/my-run --retry-errors" in text
    assert "build-site --data runs --out site" in text
    assert "--out DIRECTORY Run directory to create [default: runs/YYYYMMDD-HHMMSS-MODEL-ENGINE" \
           in text.replace("- HHMMSS", "-HHMMSS")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dry_run_plans_without_a_server_and_says_what_it_could_not_know(tmp_path) -> None:
    """Nothing listens: the plan comes at once (not after --server-wait), from the
    flags, naming what only the server knows; nothing is written."""
    port = _closed_port()
    res = run_cli("bench", "run", "--base-url", f"http://127.0.0.1:{port}", "--dry-run",
                  "--server-wait", "600", "--contexts", "1k,max", "--concurrency", "1,4",
                  cwd=tmp_path, timeout=120)
    out = " ".join((res.stderr + res.stdout).split())
    assert res.returncode == 0, out
    assert f"planned without the server: no server answered at http://127.0.0.1:{port}" in out
    assert "not known without it: its engine, the served model, its max model length" in out
    assert "its KV budget (no Over-capacity pre-check), its slots" in out
    assert "dropped context max" in out
    assert "Will run" in out and "Traceback" not in out
    assert not any(tmp_path.iterdir()), "a dry run writes nothing"


def test_dry_run_plans_past_a_server_still_loading(refserver, tmp_path) -> None:
    srv = refserver(endpoint_answers={"/v1/models": {"status": 503, "body": "Loading model"}})
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", "--model", "m",
                  "--server-wait", "600", "--contexts", "1k", "--concurrency", "1",
                  cwd=tmp_path, timeout=120)
    out = " ".join((res.stderr + res.stdout).split())
    assert res.returncode == 0, out
    assert "planned without the server: /v1/models: answered HTTP 503" in out
    assert "not known without it: its engine, its max model length" in out  # --model given


def test_dry_run_against_a_server_that_refuses_the_key_is_still_one_line(refserver,
                                                                           tmp_path) -> None:
    srv = refserver(endpoint_answers={"/v1/models": {"status": 401}})
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", cwd=tmp_path,
                  timeout=120)
    assert res.returncode == 2 or res.returncode == 1, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "the API key is wrong or missing" in lines[0], res.stderr


def test_dry_run_of_a_resume_without_a_server_plans_from_run_yaml(tmp_path) -> None:
    """--resume R --dry-run with nothing listening: R's run.yaml knows the model and
    its max model length, so the plan says only what it still could not know."""
    from tests.support.synthetic_runs import make_measured_run

    run = make_measured_run(tmp_path / "r", run_id="r", contexts=[1024], concurrency=[1],
                            info={"model": {"served_name": "m", "max_model_len": 4096}})
    before = sorted(p.name for p in run.iterdir())
    res = run_cli("bench", "run", "--base-url", f"http://127.0.0.1:{_closed_port()}",
                  "--resume", str(run), "--dry-run", "--concurrency", "2",
                  "--server-wait", "600", cwd=tmp_path, timeout=120)
    out = " ".join((res.stderr + res.stdout).split())
    assert res.returncode == 0, out
    assert "serving m (max model length 4096)" in out
    assert "not known without it: its engine, its KV budget" in out
    assert sorted(p.name for p in run.iterdir()) == before
