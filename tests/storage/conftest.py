"""Fixtures of the storage tests: one S3 server per session, a fresh bucket per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.support.s3server import S3Server, s3_server

_BUCKETS = itertools.count()


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The server's variables set in this process (s3fs reads them) and returned for a CLI."""
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3.env()


@pytest.fixture
def bucket(s3_env: dict[str, str]) -> str:
    """A new, empty bucket's URL."""
    from rundir.storage import open_url

    name = f"runs-{next(_BUCKETS)}"
    fs, _ = open_url(f"s3://{name}")
    fs.mkdir(name)
    return f"s3://{name}"
