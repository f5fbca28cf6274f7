"""A local preview server for a built site, bound to 127.0.0.1 only.

A plain static file server, like the hosts the site is meant for: what
works here works on GitHub Pages, S3 or nginx. Hidden paths (a name
starting with a dot, such as an older build's `.cache/`) and symlinks
leading outside the folder answer 404: they are never part of the site. A
path no file can have (a NUL byte, an unpaired surrogate) answers 400, and
a request that fails anyway is one log line, never a traceback.
"""

from __future__ import annotations

import functools
import http.server
import sys
import threading
import urllib.parse
from pathlib import Path

EXTRA_TYPES = {
    ".js": "text/javascript",
    ".json": "application/json",
    ".csv": "text/csv; charset=utf-8",
    ".svg": "image/svg+xml",
    ".parquet": "application/vnd.apache.parquet",
    ".yaml": "text/yaml; charset=utf-8",
}


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **EXTRA_TYPES}

    def send_head(self):  # noqa: ANN201 - the stdlib's signature
        """400 for a path no file can have, 404 for hidden names and for anything
        whose real location is outside the served folder; otherwise the stdlib's
        static file answer."""
        url_path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        root = Path(self.directory).resolve()
        try:
            real = Path(self.translate_path(self.path)).resolve()
        except (OSError, RuntimeError):  # a symlink loop
            real = None
        except ValueError:  # a NUL byte or a lone surrogate: no file name holds one
            self.send_error(400, "Bad request path")
            return None
        hidden = any(part.startswith(".") for part in url_path.split("/") if part)
        if hidden or real is None or (real != root and root not in real.parents):
            self.send_error(404, "File not found")
            return None
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        if getattr(self.server, "quiet", False):
            return
        super().log_message(format, *args)


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: tuple) -> None:
        """One line, not socketserver's traceback, for a request that failed
        (a client gone mid-answer, a path this module did not foresee)."""
        if getattr(self, "quiet", False):
            return
        exc = sys.exc_info()[1]
        what = f"{type(exc).__name__}: {' '.join(str(exc).split())}" if exc else "unknown error"
        print(f"serve: a request from {client_address[0]} failed ({what[:200]})",
              file=sys.stderr, flush=True)


def make_server(directory: Path, port: int = 8000, *, host: str = "127.0.0.1",
                quiet: bool = False) -> http.server.ThreadingHTTPServer:
    """A threading static server for directory (port 0 picks a free port)."""
    handler = functools.partial(_Handler, directory=str(Path(directory)))
    server = _Server((host, port), handler)
    server.quiet = quiet  # type: ignore[attr-defined]
    server.daemon_threads = True
    return server


def serve_in_thread(directory: Path, port: int = 0) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Start a quiet server in a daemon thread; returns it and its base URL (for tests)."""
    server = make_server(directory, port, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, real_port = server.server_address[:2]
    return server, f"http://{host}:{real_port}/"


def serve(directory: Path, port: int = 8000) -> None:
    """Serve until Ctrl+C."""
    server = make_server(directory, port)
    host, real_port = server.server_address[:2]
    print(f"Serving {directory} at http://{host}:{real_port}/  (Ctrl+C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
