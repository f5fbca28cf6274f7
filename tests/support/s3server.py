"""A real S3-compatible HTTP server for the storage tests: moto's server (moto_server).

Why moto's server and not a mock of the client: the tests talk HTTP to it through
the same s3fs/botocore stack a maintainer's bucket sees (listing pages, ETags, a
missing bucket's error), started as a separate process on a free port. Why moto
and not MinIO or LocalStack: it installs from the Python registry with pip alone
(MinIO's server is a Go binary from elsewhere; LocalStack needs Docker), starts in
about a second, and keeps everything in memory (docs/publishing.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# Test credentials: any value works with moto; the secret is long and distinctive so
# the tests can show it never reaches an output, a manifest or a page.
ACCESS_KEY = "AKIDTESTSTORAGE0001"
SECRET_KEY = "s3cr3t-Storage-Test-Value-9f2b7c41"
_READY = re.compile(r"Running on http://127\.0\.0\.1:(\d+)")


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen

    def env(self) -> dict[str, str]:
        """The variables s3fs (botocore) reads: the endpoint and the test credentials."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true"}


@contextmanager
def s3_server(timeout: float = 60.0) -> Iterator[S3Server]:
    """Start moto's S3 server on a free port (it picks with port 0 and says which)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from moto.server import main; sys.exit(main())",
         "-H", "127.0.0.1", "-p", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    port: list[str] = []
    seen: list[str] = []
    settled = threading.Event()  # the port is known, or the server's output ended

    def read() -> None:  # keeps draining its output so the server never blocks on a full pipe
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if not port and (m := _READY.search(line)):
                port.append(m.group(1))
                settled.set()
        settled.set()  # the server exited before saying its port

    threading.Thread(target=read, daemon=True).start()
    settled.wait(timeout)
    try:
        if not port:
            raise RuntimeError(f"moto_server did not start: {''.join(seen)[-2000:]}")
        yield S3Server(f"http://127.0.0.1:{port[0]}", proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
