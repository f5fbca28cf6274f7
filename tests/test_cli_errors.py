"""Bad input as a new user would give it: one line, non-zero exit, no traceback."""

from __future__ import annotations

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
