"""Headless Chromium for tests: dump a page's DOM, take a screenshot, read the PNG.

Tests that need the browser call `require_chromium()`: without Chromium they
skip, unless LITMUS_REQUIRE_BROWSER=1 (CI), where they fail.
"""

from __future__ import annotations

import os
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
