"""A file server on 127.0.0.1 for the data loader tests, and no other network.

`server` serves a folder over HTTP (`http.server` in a thread, port 0),
counts the requests per path, and can misbehave per file: `"corrupt"` (one
byte changed), `"truncate"` (half the bytes, then the connection closes
under a Content-Length that promised all of them) or `"truncate_unannounced"`
(half the bytes and no Content-Length, so the client cannot tell).

Every test here also runs with `$KERAS_ATTN_DATA` unset, `$KERAS_HOME` in a
temporary folder (nothing is written to ~/.keras) and sockets refused for any
address but 127.0.0.1.
"""

import collections
import functools
import http.server
import os
import shutil
import socket
import threading

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHIPPED_MULTI30K = os.path.join(ROOT, "examples", "translation", "data", "multi30k")
SHIPPED_JSB = os.path.join(ROOT, "examples", "music", "data", "Jsb16thSeparated.json")
SHIPPED_POP909 = os.path.join(ROOT, "examples", "music", "data", "pop909")
SHIPPED_CIFAR10 = os.path.join(ROOT, "examples", "super_resolution", "data", "cifar10_sample.npz")


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        files = self.server.files
        path = self.path.split("?")[0].lstrip("/")
        files.requests[path] += 1
        full = os.path.join(files.root, *path.split("/"))
        if ".." in path.split("/") or not os.path.isfile(full):
            self.send_error(404)
            return
        with open(full, "rb") as handle:
            body = handle.read()
        mode = files.modes.get(path, "ok")
        if mode == "corrupt":
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        if mode != "truncate_unannounced":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if mode.startswith("truncate"):
            body = body[: len(body) // 2]
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True  # HTTP/1.0: the end of the body is the end of the connection

    def log_message(self, *args):
        pass


class FileServer:
    """Serves `root` at `url` (ends with "/"); `requests[path]` counts GETs."""

    def __init__(self, root):
        self.root = root
        self.requests = collections.Counter()
        self.modes = {}
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.files = self
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        self.running = True

    def add(self, source, relative_path):
        """Copies the file `source` to `relative_path` ("/"-separated) under the root."""
        target = os.path.join(self.root, *relative_path.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(source, target)
        return target

    def total(self):
        return sum(self.requests.values())

    def stop(self):
        if self.running:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()
            self.running = False


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    files = FileServer(str(root))
    yield files
    files.stop()


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "keras_home")


@pytest.fixture(autouse=True)
def _local_only(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_ATTN_DATA", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "default_keras_home"))
    connect = socket.socket.connect

    @functools.wraps(connect)
    def local_connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in (
            "127.0.0.1",
            "::1",
        ):
            raise OSError(f"the data loader tests use no network but 127.0.0.1; tried {address}")
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", local_connect)
