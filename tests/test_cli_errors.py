"""Bad input as a new user would give it: one line, non-zero exit, no traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bench.cli import main
from tests.engines import free_port


def _one_line_error(res) -> str:
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_no_server_at_url(cli, tmp_path) -> None:
    port = free_port()
    line = _one_line_error(cli("bench", "run", "--base-url", f"http://127.0.0.1:{port}",
                               "--out", "x", cwd=tmp_path))
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
