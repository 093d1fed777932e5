"""A headless Chromium driven over the DevTools protocol on a pipe: a few lines, no package.

Chromium started with ``--remote-debugging-pipe`` reads protocol messages (JSON, each
ended by a NUL byte) on its file descriptor 3 and writes its replies on 4. That is all
a test needs to load a page, run JavaScript in it and click with the mouse.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find() -> str | None:
    """The path of an installed Chromium, or None."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless Chromium showing one page."""

    def __init__(self, executable: str, url: str, *, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="faultbench-chromium-")
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        self._proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self._profile}", url],
            close_fds=False,  # 3 and 4, set up below, must stay open (the rest are not inheritable)
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: _move_fds(to_chrome_r, from_chrome_w),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._out = os.fdopen(to_chrome_w, "wb", buffering=0)
        self._in = os.fdopen(from_chrome_r, "rb", buffering=0)
        self._buffer = b""
        self._next = 0
        target = next(
            t["targetId"]
            for t in self.send("Target.getTargets")["targetInfos"]
            if t["type"] == "page"
        )
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.wait_until(
            f"location.href === {json.dumps(url)} && document.readyState === 'complete'"
        )

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events in between are skipped)."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self._out.write(json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})  # type: ignore[no-any-return]
        raise TimeoutError(f"{method}: no answer in {self.timeout} s")

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = self._in.read(65536)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)  # type: ignore[no-any-return]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.send(
            "Runtime.evaluate", self._session, expression=expression, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['result'].get('description')}")
        return result["result"].get("value")

    def wait_until(self, expression: str) -> None:
        """Wait until ``expression`` is true in the page."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):  # the page is being replaced
                if self.evaluate(expression):
                    return
            time.sleep(0.05)
        raise TimeoutError(f"never true: {expression}")

    def click(self, selector: str) -> None:
        """Press and release the mouse over the middle of the element ``selector``."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
            "e.scrollIntoView(); const r = e.getClientRects()[0]; "
            "return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                self._session,
                type=kind,
                x=box[0],
                y=box[1],
                button="left",
                clickCount=1,
            )

    def close(self) -> None:
        """End chromium and remove its profile."""
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close")
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._out.close()
        self._in.close()
        shutil.rmtree(self._profile, ignore_errors=True)


def _move_fds(read_fd: int, write_fd: int) -> None:
    """In the child: the protocol's pipes on descriptors 3 (in) and 4 (out)."""
    read_copy, write_copy = os.dup(read_fd), os.dup(write_fd)
    os.dup2(read_copy, 3)  # dup2 makes them inheritable
    os.dup2(write_copy, 4)


def file_url(path: Path) -> str:
    """The file:// address of ``path``."""
    return path.resolve().as_uri()
