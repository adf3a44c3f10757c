"""Headless Chromium for tests: dump a page's DOM, take a screenshot, read the PNG,
or drive a tab (`Tab`) to measure the laid-out page and follow a link's #fragment.

Tests that need the browser call `require_chromium()`: without Chromium they
skip, unless LITMUS_REQUIRE_BROWSER=1 (CI), where they fail.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest

TIMEOUT_SECONDS = 60
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--hide-scrollbars", "--force-device-scale-factor=1",
]


def require_chromium() -> str:
    """The chromium binary, or a skip (a failure when LITMUS_REQUIRE_BROWSER=1)."""
    binary = os.environ.get("LITMUS_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if binary:
        return binary
    message = "headless Chromium not found (apt-get install chromium, or set LITMUS_CHROMIUM)"
    if os.environ.get("LITMUS_REQUIRE_BROWSER") == "1":
        pytest.fail(message + "; LITMUS_REQUIRE_BROWSER=1 requires it")
    pytest.skip(message)


def _run(page: Path, *flags: str) -> subprocess.CompletedProcess:
    binary = require_chromium()
    # A fresh profile per run: no state leaks between tests, nothing written to $HOME.
    with tempfile.TemporaryDirectory(prefix="litmus-chromium-") as profile:
        command = [binary, *FLAGS, f"--user-data-dir={profile}", *flags, Path(page).resolve().as_uri()]
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    if result.returncode != 0:
        raise AssertionError(f"chromium exited {result.returncode}: {result.stderr[-2000:]}")
    return result


def dump_dom(page: Path) -> str:
    """The DOM after load, serialized: what the page became, not what it was."""
    return _run(page, "--dump-dom").stdout


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 2400) -> Path:
    _run(page, f"--screenshot={png}", f"--window-size={width},{height}")
    return png


def read_png(path: Path) -> np.ndarray:
    """An 8-bit RGB or RGBA PNG as a (height, width, channels) uint8 array, without Pillow."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, chunks = 8, {}
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        chunks.setdefault(kind, []).append(data[position + 8:position + 8 + length])
        position += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"][0])
    assert depth == 8 and colour in (2, 6) and interlace == 0, "only 8-bit RGB/RGBA, not interlaced"
    channels = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(chunks[b"IDAT"])), dtype=np.uint8).reshape(height, -1)
    image = np.zeros((height, width * channels), dtype=np.uint8)
    previous = np.zeros(width * channels, dtype=np.uint8)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].copy()
        if kind == 1:  # Sub: a running sum per channel, wrapping at 256
            line = np.cumsum(line.reshape(width, channels), axis=0, dtype=np.uint8).reshape(-1)
        elif kind == 2:  # Up
            line = line + previous
        elif kind in (3, 4):  # Average, Paeth: each byte depends on the one just decoded
            line = _unfilter_sequential(kind, line.tolist(), previous.tolist(), channels)
        image[y] = previous = line
    return image.reshape(height, width, channels)


def _unfilter_sequential(kind: int, line: list, previous: list, channels: int) -> np.ndarray:
    for x in range(len(line)):
        left = line[x - channels] if x >= channels else 0
        up, corner = previous[x], previous[x - channels] if x >= channels else 0
        if kind == 3:
            predicted = (left + up) // 2
        else:
            estimate = left + up - corner
            a, b, c = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
            predicted = left if a <= b and a <= c else up if b <= c else corner
        line[x] = (line[x] + predicted) & 0xFF
    return np.array(line, dtype=np.uint8)


def count_near(image: np.ndarray, colour: str, tolerance: int = 6) -> int:
    """Pixels within `tolerance` per channel of an #rrggbb colour."""
    target = np.frombuffer(bytes.fromhex(colour[1:]), dtype=np.uint8).astype(np.int16)
    difference = np.abs(image[..., :3].astype(np.int16) - target)
    return int(np.count_nonzero((difference <= tolerance).all(axis=-1)))


def distinct_colours(image: np.ndarray) -> int:
    return len(np.unique(image[..., :3].reshape(-1, 3), axis=0))


class Tab:
    """One headless Chromium tab driven over the DevTools protocol, on a pipe
    (`--remote-debugging-pipe`: messages are JSON ended by NUL, Chromium
    reads fd 3 and writes fd 4), so no port is opened. The page's own
    scripts stay forbidden by its CSP; `evaluate` runs in the inspector.

        with Tab(width=800) as tab:
            tab.open(page, "#fragment")
            tab.evaluate("document.documentElement.scrollWidth")
    """

    def __init__(self, width: int = 1280, height: int = 900):
        self.width, self.height = width, height

    def __enter__(self) -> Tab:
        binary = require_chromium()
        self._profile = tempfile.TemporaryDirectory(prefix="litmus-chromium-")
        commands, self._to_browser = os.pipe()
        self._from_browser, replies = os.pipe()
        # Out of the way of 3 and 4, which the child's remapping below writes over.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (commands, replies)]
        for fd in (commands, replies):
            os.close(fd)

        def remap():  # in the child, before exec: dup2 leaves 3 and 4 inheritable
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self._process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self._profile.name}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=remap, close_fds=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        for fd in high:
            os.close(fd)
        self._buffer, self._last_id, self._events = b"", 0, []
        target = self._call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self._call("Page.enable", self._session)
        self._call("Emulation.setDeviceMetricsOverride", self._session, width=self.width, height=self.height,
                   deviceScaleFactor=1, mobile=False)
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self._call("Browser.close")
            self._process.wait(timeout=TIMEOUT_SECONDS)
        except (OSError, TimeoutError, EOFError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)
            self._profile.cleanup()

    def open(self, page: Path, fragment: str = "") -> None:
        """Loads the file `page` (with a "#fragment", as a link would) and waits for its load event."""
        self._call("Page.navigate", self._session, url=Path(page).resolve().as_uri() + fragment)
        self._event("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression in the page."""
        reply = self._call("Runtime.evaluate", self._session, expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, png: Path) -> np.ndarray:
        """The whole page, beyond the window, as pixels in page coordinates (written to `png` too)."""
        width, height = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        shot = self._call("Page.captureScreenshot", self._session, format="png", captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        Path(png).write_bytes(base64.b64decode(shot["data"]))
        return read_png(png)

    def _call(self, method: str, session: str | None = None, **params) -> dict:
        self._last_id += 1
        message = {"id": self._last_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._last_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply["result"]
            self._events.append(reply)

    def _event(self, method: str) -> dict:
        while True:
            for index, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == self._session:
                    return self._events.pop(index)
            self._events.append(self._read())

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            if not select.select([self._from_browser], [], [], TIMEOUT_SECONDS)[0]:
                raise TimeoutError(f"chromium sent nothing for {TIMEOUT_SECONDS} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise EOFError(f"chromium closed its pipe (exit code {self._process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)
