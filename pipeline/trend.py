"""`litmus-score trend OUTPUT_ROOT`: the history of nights, read and written.

    read_nights(root, limit)   the latest `limit` complete nights under root, on any Beam
                               filesystem: a night is read through read_run (its _SUCCESS,
                               its manifest, the metrics.json checksum), its comparison.json
                               only as its manifest lists it; a night being written, or one
                               that crashed, has no _SUCCESS and is not read
    write_trend(root, doc)     trend.json and trend.html at the root, each written whole
    refresh(root)              `nightly`'s last step
    main(argv)                 the command

The document itself is litmus_score.report.trend's; the page, trend_page's.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json

from apache_beam.io.filesystems import FileSystems

from litmus_score import text
from litmus_score.exits import Exit
from litmus_score.report.trend import DEFAULT_NIGHTS, TREND_FILE, TREND_PAGE, trend_document
from litmus_score.report.trend_page import render_trend
from litmus_score.scoring.layout import COMPARISON_FILE, NIGHT_PREFIX
from pipeline.publish import PublishError, completed_subfolders, read_run
from transforms.files import to_json, write_whole


def _day(name: str) -> str | None:
    """The date of a night's folder name (date=YYYY-MM-DD), or None for any other name."""
    day = name[len(NIGHT_PREFIX):]
    try:
        return day if datetime.date.fromisoformat(day).isoformat() == day else None
    except ValueError:
        return None


def _listed_json(folder: str, manifest: dict, name: str):
    """A document the manifest lists, checked against its sha256; None when it lists none."""
    entry = next((e for e in manifest.get("outputs") or [] if e.get("path") == name), None)
    if entry is None:
        return None
    with FileSystems.open(FileSystems.join(folder, name)) as handle:
        data = handle.read()
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise PublishError(f"{folder!r}: {name} does not match its manifest")
    return json.loads(data)


def read_nights(root: str, limit: int = DEFAULT_NIGHTS) -> tuple:
    """(nights, skipped): the latest `limit` complete nights under `root`, oldest first, each
    {date, folder, metrics, manifest, comparison}; and [{folder, reason}] for folders that
    hold _SUCCESS but could not be read as a night (they are left out, and said so)."""
    root = root.rstrip("/") or "/"
    days = sorted((day, name) for name in completed_subfolders(root, NIGHT_PREFIX) if (day := _day(name)))
    nights, skipped = [], []
    for day, name in days[-limit:]:
        folder = FileSystems.join(root, name)
        try:
            metrics, manifest = read_run(folder)
            night = manifest.get("night") if isinstance(manifest.get("night"), dict) else {}
            if night.get("date") != day:
                raise PublishError(f"{folder!r} holds the night {night.get('date')!r}, not {day}")
            comparison = _listed_json(folder, manifest, COMPARISON_FILE)
        except (PublishError, OSError, ValueError) as error:
            skipped.append({"folder": name, "reason": str(error)})
            continue
        nights.append({"date": day, "folder": name, "metrics": metrics, "manifest": manifest,
                       "comparison": comparison})
    return nights, skipped


def write_trend(root: str, document: dict) -> None:
    """root/trend.json and root/trend.html, each written whole (a new name, then a rename)."""
    write_whole(root, TREND_FILE, to_json(document).encode("utf-8"))
    write_whole(root, TREND_PAGE, render_trend(document).encode("utf-8"))


def refresh(root: str) -> None:
    """`nightly`'s last step: the trend again, with the night just published. A failure here is
    reported and leaves the night's exit code alone: the night itself is published."""
    try:
        document = trend_document(*read_nights(root))
        write_trend(root, document)
    except Exception as error:
        text.error(f"warning: the trend under {root} was not refreshed: {error}")
        return
    print(f"trend: {len(document['nights'])} night(s) in {text.display(root, 200)}/{TREND_PAGE}")


def main(argv) -> Exit:
    parser = argparse.ArgumentParser(prog="litmus-score trend",
                                     description="The history of nights under an output root of `nightly`: "
                                                 f"writes OUTPUT_ROOT/{TREND_FILE} and OUTPUT_ROOT/{TREND_PAGE}.")
    parser.add_argument("output_root", help="the folder of the nights (local, gs://, ...)")
    parser.add_argument("--nights", type=int, default=DEFAULT_NIGHTS,
                        help=f"the latest N complete nights (default {DEFAULT_NIGHTS})")
    args = parser.parse_args(argv)

    if args.nights < 1:
        text.error(f"--nights must be positive, got {args.nights}")
        return Exit.USAGE
    root = args.output_root.rstrip("/") or "/"
    nights, skipped = read_nights(root, args.nights)
    for left_out in skipped:
        print(f"warning: {text.display(left_out['folder'], 200)} left out: {text.display(left_out['reason'], 1000)}")
    if not nights:
        text.error(f"no complete night under {root} ({NIGHT_PREFIX}YYYY-MM-DD/ with _SUCCESS)")
        return Exit.USAGE
    document = trend_document(nights, skipped)
    write_trend(root, document)
    entries = document["nights"]
    alerts = [night["date"] for night in entries if night["regressions"]]
    changes = [night["date"] for night in entries if night["rules_changed"]]
    print(f"trend: {len(entries)} night(s), {entries[0]['date']} to {entries[-1]['date']}; "
          f"alerts: {', '.join(alerts) or 'none'}; rules changed: {', '.join(changes) or 'never'}")
    print(f"wrote {text.display(FileSystems.join(root, TREND_FILE), 300)} and "
          f"{text.display(FileSystems.join(root, TREND_PAGE), 300)}")
    return Exit.OK
