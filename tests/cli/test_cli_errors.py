"""Bad input as a new user would give it: one line, non-zero exit, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.params import Seconds
from importer.cli import import_cmd
from site_builder import cli as site_cli
from tests.conftest import REPO
from tests.refserver.harness import refserver_fixture  # noqa: F401
from tests.support.real_engines import free_port


def _one_line_error(res) -> str:
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_no_server_at_url(cli, tmp_path) -> None:
    port = free_port()
    # --server-wait 0: fail at once (a server that is starting is waited for:
    # tests/collector/test_server_start.py)
    line = _one_line_error(cli("bench", "run", "--base-url", f"http://127.0.0.1:{port}",
                               "--out", "x", "--server-wait", "0", cwd=tmp_path))
    assert f"127.0.0.1:{port}" in line and "no server" in line
    assert not (tmp_path / "x").exists()


def test_bad_flags(cli, tmp_path) -> None:
    line = _one_line_error(cli("bench", "run", "--base-url", "http://127.0.0.1:1",
                               "--contexts", "eight", cwd=tmp_path))
    assert "--contexts" in line
    line = _one_line_error(cli("bench", "run", "--base-url", "ftp://x", cwd=tmp_path))
    assert "--base-url" in line


def test_missing_base_url_flag(cli, tmp_path) -> None:
    res = cli("bench", "run", cwd=tmp_path)
    assert res.returncode == 2 and "--base-url" in res.stderr and "Traceback" not in res.stderr


# -- bad flag values: refused by click types, one line naming the flag ----------

BAD_FLAGS = [
    ("--duration", "inf"), ("--duration", "nan"), ("--duration", "-1"), ("--duration", "0"),
    ("--duration", "1e400"), ("--duration", "-inf"), ("--duration", ""), ("--duration", "30s"),
    ("--duration", "1e6"),  # past a week
    ("--stall-timeout", "nan"), ("--stall-timeout", "inf"), ("--stall-timeout", "0"),
    ("--warmup-timeout", "nan"), ("--warmup-timeout", "-5"), ("--warmup-timeout", "1e400"),
    ("--ttft-timeout", "nan"), ("--ttft-timeout", "inf"), ("--ttft-timeout", "-1"),
    ("--server-wait", "nan"), ("--server-wait", "-1"), ("--server-wait", "inf"),
    ("--warmup-stable", "nan"), ("--warmup-stable", "-0.5"), ("--warmup-stable", "inf"),
    ("--warmup-stable", "-5"),  # the case: it was once clamped to 0
    ("--max-output", "0"), ("--max-output", "-1"), ("--max-output", "1.5"),
    ("--max-output", "nan"), ("--max-output", "1e400"), ("--max-output", "2k5"),
    ("--max-output", "9" * 5000),  # int() refuses 4,300+ digits: no traceback either
    ("--max-output", "2000000M"),  # past 2^40 tokens
    ("--kv-budget", "0"), ("--kv-budget", "nan"), ("--kv-budget", "1e9"), ("--kv-budget", "-1k"),
    ("--contexts", ""), ("--contexts", "eight"), ("--contexts", "8k,-1"), ("--contexts", "0"),
    ("--contexts", "nan"), ("--contexts", "inf"), ("--contexts", ","), ("--contexts", "1e400"),
    ("--prefill-contexts", "x"), ("--prefill-contexts", "0.1k"),
    ("--concurrency", "0"), ("--concurrency", "-1"), ("--concurrency", "1,a"),
    ("--concurrency", "1.5"), ("--concurrency", "²"), ("--concurrency", "1e3"),
    ("--concurrency", "99999999"), ("--concurrency", ""), ("--concurrency", "9" * 5000),
    ("--prefill-repeats", "0"), ("--prefill-repeats", "nan"), ("--prefill-repeats", "1001"),
    ("--base-url", "ftp://x"), ("--base-url", ""), ("--base-url", "http://"),
    ("--base-url", "not a url"), ("--base-url", "http://h:99999"), ("--base-url", "http://h:x"),
]


@pytest.mark.parametrize("flag, value", BAD_FLAGS, ids=lambda v: str(v)[:20])
def test_bad_flag_values_are_one_line_naming_the_flag(flag, value, tmp_path) -> None:
    args = ["run", "--base-url", "http://127.0.0.1:1", flag, value, "--out", str(tmp_path / "r")]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, (res.exit_code, res.stderr, res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: "), res.stderr
    assert len(lines[0]) < 300  # a 5,000-digit value is not echoed whole
    assert not (tmp_path / "r").exists()


def test_nan_duration_is_refused_by_the_real_cli(cli, tmp_path) -> None:
    """The issue's case: `--duration nan` wrote `duration_s: .nan` into run.yaml."""
    line = _one_line_error(cli("bench", "run", "--base-url", "http://127.0.0.1:1",
                               "--duration", "nan", "--out", "x", cwd=tmp_path))
    assert line.startswith("error: --duration: ") and "'nan'" in line
    assert not (tmp_path / "x").exists()


def test_password_in_a_bad_base_url_is_not_echoed() -> None:
    res = CliRunner().invoke(main, ["run", "--base-url", "ftp://user:hunter2-pass@host"])
    assert res.exit_code == 2 and "--base-url" in res.stderr
    assert "hunter2-pass" not in res.stderr + res.stdout


# -- an API key that cannot go into an HTTP header: refused at the flag, never shown -

KEY_PARTS = ("Sv140head", "Sv140tail")
BAD_KEYS = [f"{KEY_PARTS[0]}{sep}{KEY_PARTS[1]}" for sep in ("\r\n", "\n", "\r", "\t", "\x1b", "é")]


@pytest.mark.parametrize("key", BAD_KEYS, ids=["crlf", "lf", "cr", "tab", "esc", "non-ascii"])
def test_api_key_that_cannot_be_a_header_is_refused_at_the_flag(key, tmp_path) -> None:
    res = CliRunner().invoke(main, ["run", "--base-url", "http://127.0.0.1:1", "--api-key", key,
                                    "--server-wait", "0", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2, (res.exit_code, res.stderr, res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --api-key: expected printable ASCII")
    assert not any(part in res.stderr + res.stdout for part in KEY_PARTS)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_api_key_with_a_line_end_is_named_not_a_missing_server(how, cli, refserver,
                                                                tmp_path) -> None:
    """The issue's case: `--api-key $'abc\\r\\ndef'` was reported as "no server
    answers ... is --base-url right?" against a server that was there."""
    srv = refserver()
    key = BAD_KEYS[0]
    args = ["bench", "run", "--base-url", srv.base_url, "--server-wait", "0", "--out", "x"]
    env = {"OPENAI_API_KEY": key} if how == "env" else {"OPENAI_API_KEY": ""}
    res = cli(*args, *(["--api-key", key] if how == "flag" else []), cwd=tmp_path, env=env)
    line = _one_line_error(res)
    assert res.returncode == 2, line
    named = "error: --api-key: " if how == "flag" else "error: OPENAI_API_KEY (the default of --api-key): "
    assert line.startswith(named) and "control character (CR" in line, line
    assert not any(part in res.stderr + res.stdout for part in KEY_PARTS)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("args, flag", [
    (["--out", "a", "--resume", "b"], "--out and --resume"),
    (["--retry-errors"], "--retry-errors"),
])
def test_flags_that_contradict_each_other(args, flag, tmp_path) -> None:
    res = CliRunner().invoke(main, ["run", "--base-url", "http://127.0.0.1:1", *args])
    assert res.exit_code == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}"), res.stderr


def test_help_documents_the_exit_statuses() -> None:
    res = CliRunner().invoke(main, ["run", "--help"])
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "Exit status:" in text
    for code in ("0 every planned cell", "1 the run stopped", "2 a bad flag", "3 the run finished"):
        assert code in text, code


# -- no silent clamping: a value is refused or kept as given ----------------------


@pytest.mark.parametrize("zero_ok", [True, False])
def test_seconds_are_kept_as_given_or_refused(zero_ok) -> None:
    """Nothing is moved into range: in-range values come back unchanged and
    every out-of-range one is an error, never the nearest allowed value."""
    kind = Seconds(zero_ok=zero_ok)
    for given in ("0.25", "3", "604800"):
        assert kind.convert(given, None, None) == float(given)
    assert (kind.convert("0", None, None) == 0.0) if zero_ok else True
    for bad in ("-5", "-0.0001", "604800.5", *(() if zero_ok else ("0",))):
        with pytest.raises(Exception) as err:
            kind.convert(bad, None, None)
        assert "expected" in str(err.value)


# -- `bench import`: one command among the others ----------------------------------


def test_import_is_registered_like_run() -> None:
    assert main.commands["import"] is import_cmd
    res = CliRunner().invoke(main, ["--help"])
    assert "import" in res.output and "run" in res.output


def test_a_broken_importer_stops_bench_loudly() -> None:
    """A real import error in the importer is an error, not a command that vanishes."""
    code = ("import sys; sys.modules['importer.cli'] = None\n"
            "try:\n    import bench.cli\nexcept ImportError:\n    sys.exit(7)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 7, (res.returncode, res.stderr)


def test_import_without_its_path_is_one_line_exit_2() -> None:
    res = CliRunner().invoke(main, ["import"])
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines == ["error: PATH: missing (this argument is required)"], res.stderr


# -- build-site: the same one line and exit status 2 for a bad flag ---------------

SITE_BAD_FLAGS = [
    (["serve", "--port", "abc"], "--port"),
    (["serve", "--port", "70000"], "--port"),
    (["serve", "--port", "-1"], "--port"),
    (["--methodology", "no-such-file.md"], "--methodology"),
    (["--out"], "--out"),
    (["serve", "--dir", "site"], "'--dir'"),  # gone: serve previews --out
    (["--no-such-flag"], "'--no-such-flag'"),
    (["--slo", "ttft_p99=0"], "--slo"), (["--slo", "ttft_p99=-1"], "--slo"),
    (["--slo", "ttft_p98=100"], "--slo"), (["--slo", "e2e_p99=100"], "--slo"),
    (["--slo", "ttft_p99=1,ttft_p90=2"], "--slo"), (["--slo", ""], "--slo"),
    (["--slo", "tbt_p99=fast"], "--slo"), (["--slo", "tbt_p99_9=nan"], "--slo"),
]


@pytest.mark.parametrize("args, flag", SITE_BAD_FLAGS, ids=lambda v: " ".join(v)[:30])
def test_build_site_bad_flag_is_one_line_exit_2(args, flag, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(site_cli.main, args)
    assert res.exit_code == 2, (res.exit_code, res.stderr, res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], res.stderr
    assert "Usage:" not in res.stderr + res.stdout


def test_build_site_bad_flag_through_the_real_cli(cli, tmp_path) -> None:
    line = _one_line_error(cli("build-site", "serve", "--port", "x", cwd=tmp_path))
    assert line.startswith("error: --port: ")


def test_build_site_bad_slo_names_the_flag_and_what_was_expected(cli, tmp_path) -> None:
    line = _one_line_error(cli("build-site", "--slo", "ttft_p98=100", cwd=tmp_path))
    assert line == ("error: --slo: 'ttft_p98=100': unknown level 'p98'; expected one of "
                    "p50, p90, p95, p99, p99.9")
    line = _one_line_error(cli("build-site", "--slo", "tbt_p99=50,tbt_p90=20", cwd=tmp_path))
    assert line.startswith("error: --slo: ") and "limited twice" in line


# -- build-site serve: previews --out ---------------------------------------------


def test_serve_previews_the_roots_out(tmp_path, monkeypatch) -> None:
    served = []
    monkeypatch.setattr(site_cli.serve_mod, "serve", lambda d, p: served.append((d, p)))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(site_cli.main, ["--out", "elsewhere", "serve", "--port", "0"])
    assert res.exit_code == 0, res.stderr
    assert served == [(Path("elsewhere"), 0)]


def test_serve_without_a_built_out_is_one_line_exit_2(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(site_cli.serve_mod, "serve", lambda d, p: pytest.fail("served"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "site").mkdir()  # the old default must not be picked instead
    res = CliRunner().invoke(site_cli.main, ["--out", "nowhere", "serve"])
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --out: nowhere: no such folder")


def test_serve_takes_out_after_it_too(tmp_path, monkeypatch) -> None:
    """Issue 32, item 9: `build-site serve --out site` failed with "No such option
    '--out'" where only `build-site --out site serve` worked."""
    served = []
    monkeypatch.setattr(site_cli.serve_mod, "serve", lambda d, p: served.append((d, p)))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(site_cli.main, ["serve", "--out", "elsewhere", "--port", "0"])
    assert res.exit_code == 0, res.stderr
    same = CliRunner().invoke(site_cli.main, ["--out", "elsewhere", "serve", "--out",
                                              "elsewhere", "--port", "0"])
    assert same.exit_code == 0, same.stderr
    assert served == [(Path("elsewhere"), 0)] * 2
    both = CliRunner().invoke(site_cli.main, ["--out", "site", "serve", "--out", "elsewhere"])
    assert both.exit_code == 2
    assert [ln for ln in both.stderr.splitlines() if ln.strip()] == [
        "error: --out: given twice (site before serve, elsewhere after it); give one"]


@pytest.mark.parametrize("order", ["before", "after"])
def test_serve_answers_from_out_over_http(tmp_path, order) -> None:
    """End to end: the real command serves --out's files (not ./site's), with --out
    before `serve` or after it."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "which.txt").write_text("default\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "which.txt").write_text("mine\n")
    port = free_port()
    code = "import sys; from site_builder.cli import main; sys.exit(main())"
    args = (["--out", "mine", "serve"] if order == "before" else ["serve", "--out", "mine"])
    proc = subprocess.Popen([sys.executable, "-c", code, *args, "--port",
                             str(port)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        body, deadline = None, time.monotonic() + 60
        while body is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/which.txt", timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                time.sleep(0.2)
        assert body == "mine\n", proc.poll()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
