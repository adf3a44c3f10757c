"""Filesystems a test can break: a private mount namespace with a small or read-only tmpfs.

`litmus-score` runs inside `unshare --mount` (root, which CI has) with a
tmpfs mounted on a folder only that process sees: full after a few bytes,
or read-only. Nothing outside the namespace is touched, and the mount ends
with the process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300


def private_mounts_available() -> bool:
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--mount", "--", "true"], capture_output=True).returncode == 0


def require_private_mounts() -> None:
    if not private_mounts_available():
        if os.environ.get("CI"):
            pytest.fail("CI must run the filesystem-failure tests: they need unshare --mount (root)")
        pytest.skip("needs a private mount namespace (unshare --mount, as root)")


LISTED = "@@listed "


def litmus_on_tmpfs(folder: Path, options: str, *argv, fill: bool = False):
    """(the run, the files left on the tmpfs) for `python -m pipeline ARGV`
    with a tmpfs mounted on `folder` (mount `options`: "size=64k", "ro");
    with `fill`, the tmpfs is filled to the last byte first (the filler is
    not listed). The run's returncode is litmus-score's."""
    folder.mkdir(parents=True, exist_ok=True)
    script = ('mount -t tmpfs -o "$1" tmpfs "$0" || exit 99; '
              + ('dd if=/dev/zero of="$0/filler" bs=4k 2>/dev/null; ' if fill else '')
              + 'shift; "$@"; code=$?; '
              + f'find "$0" -mindepth 1 ! -name filler -printf "{LISTED}%P\\n"; exit $code')
    done = subprocess.run(["unshare", "--mount", "--", "sh", "-c", script, str(folder), options,
                           sys.executable, "-m", "pipeline", *map(str, argv)],
                          cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)
    files = sorted(line[len(LISTED):] for line in done.stdout.splitlines() if line.startswith(LISTED))
    return done, files
