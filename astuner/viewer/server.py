"""The viewer's HTTP server (the standard library's ThreadingHTTPServer: GET only, read-only).

Routes: `/` the page; `/static/<name>` its script and style (a fixed list shipped in the package);
`/api/run` the run's curves and steps; `/api/step/<N>` that step's episodes and GRPO groups;
`/api/episode/<N>/<uuid>` one episode with its samples token by token. Anything else is 404: no request
names a file. Binds 127.0.0.1 unless another host is asked for (then a warning: the run's prompts and
answers become readable by whoever can reach that address).
"""

from __future__ import annotations

import json
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional
from urllib.parse import unquote, urlsplit

from astuner.viewer.data import RunData, StoreData, is_trace_store

STATIC = Path(__file__).resolve().parent / "static"
FILES = {"/": ("index.html", "text/html; charset=utf-8"),
         "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
         "/static/style.css": ("style.css", "text/css; charset=utf-8")}
STEP = re.compile(r"^/api/step/(\d{1,9})$")
EPISODE = re.compile(r"^/api/episode/(\d{1,9})/([A-Za-z0-9_.:-]{1,128})$")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


class _Handler(BaseHTTPRequestHandler):
    server: "ViewerServer"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the run's own log is the console
        return

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, value: Any) -> None:
        self._send(HTTPStatus.OK, json.dumps(value, ensure_ascii=False, allow_nan=False, default=str).encode(),
                   "application/json; charset=utf-8")

    def _not_found(self) -> None:
        self._send(HTTPStatus.NOT_FOUND, b'{"error": "not found"}', "application/json; charset=utf-8")

    def do_HEAD(self) -> None:
        self.do_GET()

    def _host_allowed(self) -> bool:
        """A server on loopback answers only requests addressed to it: a web page that rebinds its own name to
        127.0.0.1 (DNS rebinding) sends its name as Host and is refused. A server on another address answers
        that address and the loopback names; one on every address (0.0.0.0, ::) was exposed on purpose."""
        bound = str(self.server.server_address[0])
        if bound in ("0.0.0.0", "::"):
            return True
        host = (self.headers.get("Host") or "").strip().lower()
        name = host[1:host.index("]")] if host.startswith("[") and "]" in host else host.rsplit(":", 1)[0]
        return name in {*LOCAL_HOSTS, bound.lower(), self.server.host_name.lower()}

    def do_GET(self) -> None:
        if not self._host_allowed():
            self._send(HTTPStatus.FORBIDDEN, b'{"error": "this viewer answers requests for its own address only"}',
                       "application/json; charset=utf-8")
            return
        path = unquote(urlsplit(self.path).path)
        data = self.server.data
        try:
            if path in FILES:
                name, kind = FILES[path]
                self._send(HTTPStatus.OK, (STATIC / name).read_bytes(), kind)
            elif path == "/api/run":
                self._json({**data.run(), "live": self.server.live})
            elif m := STEP.match(path):
                found = data.step(int(m.group(1)))
                self._json(found) if found is not None else self._not_found()
            elif m := EPISODE.match(path):
                found = data.episode(int(m.group(1)), m.group(2))
                self._json(found) if found is not None else self._not_found()
            else:
                self._not_found()
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # noqa: BLE001 - a broken run file: an answer naming it, never a dropped connection
            step = m.group(1) if (m := STEP.match(path) or EPISODE.match(path)) else None
            source = f"trajectories/step_{step}" if step is not None else "metrics.jsonl"
            message = " ".join(f"{source}: {type(exc).__name__}: {exc}".split())[:300]
            try:
                self._send(HTTPStatus.INTERNAL_SERVER_ERROR, json.dumps({"error": message}).encode(),
                           "application/json; charset=utf-8")
            except OSError:
                pass


class ViewerServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog (the standard library's 5 left concurrent page loads unanswered)

    def __init__(self, run_root: Path, host: str = "127.0.0.1", port: int = 0, live: bool = False):
        self.data = StoreData(run_root) if Path(run_root).is_file() else RunData(run_root)
        self.host_name = host  # the name it was started with (--host), accepted as Host
        self.live = live  # beside a running run (--with-logview): the page refreshes its curves
        if ":" in host:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}/"


def _open(run_root: Path, host: str, port: int, live: bool = False, must_exist: bool = True) -> ViewerServer:
    """Bound (the port is taken, or UserError saying why not), not yet serving."""
    from astuner.errors import UserError

    root = Path(run_root)
    if root.is_file():
        if not is_trace_store(root):
            raise UserError(f"{root} is a file but no trace store; name a run folder (launcher_record/"
                            f"<experiment_name>), an eval folder or a trace store (astuner serve --store)")
        from astuner.records.trace_store import TraceStore

        TraceStore.read(root)  # its schema version checked: a DataError in one line
    elif must_exist and not root.is_dir():
        raise UserError(f"{root} is not a run folder (expected launcher_record/<experiment_name>)")
    if host not in LOCAL_HOSTS:
        from loguru import logger

        logger.warning(f"the viewer listens on {host}: anyone who can reach it reads this run's prompts and answers")
    check_port(port, "--port")
    try:
        return ViewerServer(root, host, port, live)
    except OSError as exc:
        raise UserError(f"the viewer cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def check_port(port: Any, option: str) -> int:
    """A TCP port to listen on: 0 (any free one) to 65535; UserError naming the option otherwise."""
    from astuner.errors import UserError

    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise UserError(f"{option} {port!r} is not a port; use 0 (any free port) to 65535")
    return port


def start_viewer(run_root: Path, host: str = "127.0.0.1", port: int = 0, live: bool = False,
                 must_exist: bool = True) -> ViewerServer:
    """Serve in a daemon thread (beside a run: --with-logview, started before its run folder is made, so a busy
    port is refused before anything is written: `must_exist` False); `server.shutdown()` stops it."""
    server = _open(run_root, host, port, live, must_exist)
    threading.Thread(target=server.serve_forever, name="astuner-viewer", daemon=True).start()
    return server


def serve_forever(run_root: Path, host: str = "127.0.0.1", port: int = 8765,
                  announce: Optional[Any] = print) -> None:
    """`astuner view`: serve until Ctrl-C."""
    server = _open(run_root, host, port)
    if announce:
        announce(f"astuner view: {server.data.root} at {server.url} (Ctrl-C stops)")
    try:
        server.serve_forever()
    finally:
        server.server_close()
