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
import hashlib
import json

from apache_beam.io.filesystems import FileSystems

from litmus_score import text
from litmus_score.exits import Exit
from litmus_score.report.trend import DEFAULT_NIGHTS, TREND_FILE, TREND_PAGE, trend_document
from litmus_score.report.trend_page import render_trend
from litmus_score.scoring.layout import COMPARISON_FILE, NIGHT_PREFIX
from pipeline.nights import night_folders, read_night
from pipeline.publish import PublishError
from transforms.files import to_json, write_whole


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
    """(nights, skipped): the latest `limit` complete nights under `root` (pipeline.nights),
    oldest first, each {date, folder, metrics, manifest, comparison}; and [{folder, reason}]
    for folders that hold _SUCCESS but could not be read as a night, or whose documents the
    trend cannot read (another version's metrics.json): they are left out, and said so."""
    root = root.rstrip("/") or "/"
    nights, skipped = [], []
    for day, name in night_folders(root)[-limit:]:
        try:
            run = read_night(root, name)
            night = {"date": day, "folder": name, "metrics": run.metrics, "manifest": run.manifest,
                     "comparison": _listed_json(run.folder, run.manifest, COMPARISON_FILE)}
            trend_document([night])  # the night alone: one it cannot read costs only itself
        except (PublishError, OSError, ValueError) as error:
            skipped.append({"folder": name, "reason": str(error)})
            continue
        except (KeyError, TypeError, AttributeError) as error:
            skipped.append({"folder": name, "reason": f"not a night this version reads: {type(error).__name__}: "
                                                      f"{error}"})
            continue
        nights.append(night)
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
