"""What a night is, stated once for `nightly` (its baseline), `trend` and
`show`/`compare` through them: OUTPUT_ROOT/date=YYYY-MM-DD/ holding a
complete run (read_run: _SUCCESS, a manifest whose metrics.json checksum
holds, metrics.json a JSON object) whose manifest names that same night.
A copy or a rename of another night's folder is no night."""

from __future__ import annotations

import datetime

from apache_beam.io.filesystems import FileSystems

from litmus_score.scoring.layout import NIGHT_PREFIX
from pipeline.publish import PublishError, Run, completed_subfolders, pin_run


def day_of(name: str) -> str | None:
    """The date of a night's folder name (date=YYYY-MM-DD), or None for any other name."""
    if not name.startswith(NIGHT_PREFIX):
        return None
    day = name[len(NIGHT_PREFIX):]
    try:
        return day if datetime.date.fromisoformat(day).isoformat() == day else None
    except ValueError:
        return None


def night_folders(root: str) -> list:
    """(date, folder name) of every folder under `root` named as a night and holding _SUCCESS, oldest first."""
    return sorted((day, name) for name in completed_subfolders(root, NIGHT_PREFIX) if (day := day_of(name)))


def read_night(root: str, name: str) -> Run:
    """The night in root/name, read now (pinned, its stored policy with it), or PublishError saying why it is none."""
    run = pin_run(FileSystems.join(root, name), role=name)
    night = run.manifest.get("night") if isinstance(run.manifest, dict) else None
    recorded = night.get("date") if isinstance(night, dict) else None
    if recorded != day_of(name):
        raise PublishError(f"{run.folder!r} holds the night {recorded!r}, not {day_of(name)}")
    return run
