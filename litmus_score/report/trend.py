"""The history of nights: trend.json and trend.html for an output root of `nightly`.

    read_nights(root, limit)   the latest `limit` complete nights under root, on any Beam
                               filesystem: a night is read through read_run (its _SUCCESS,
                               its manifest, the metrics.json checksum), its comparison.json
                               only as its manifest lists it; a night being written, or one
                               that crashed, has no _SUCCESS and is not read
    trend_document(nights)     trend.json (pure): per night its rules, the rules that changed
                               since the night before, its alert and unscored share; per
                               agent, commit-time and proposal-time misuse night by night
    write_trend(root, doc)     both files at the root, each written whole
    main(argv)                 litmus-score trend OUTPUT_ROOT [--nights N]

Nights scored under other rules (spec version, adjudication mode or policy,
as litmus_score.scoring.compare states them) are not comparable: each run of
nights under the same rules is a `segment`, and the page draws no line
between two segments. trend.html is rendered from trend.json alone
(litmus_score.report.trend_page), as report.html is from a run's documents.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import date as Date

from litmus_score.scoring.compare import rules_changed, rules_of
from litmus_score.scoring.layout import COMPARISON_FILE, NIGHT_PREFIX
from litmus_score.scoring.stats import wilson_interval

TREND_SCHEMA = "litmus-trend/1"
TREND_FILE = "trend.json"
TREND_PAGE = "trend.html"
DEFAULT_NIGHTS = 30
# trend.json keeps the agents with most scored trajectories over the nights shown.
MAX_AGENTS = 200


def _day(name: str) -> str | None:
    """The date of a night's folder name (date=YYYY-MM-DD), or None for any other name."""
    day = name[len(NIGHT_PREFIX):]
    try:
        return day if Date.fromisoformat(day).isoformat() == day else None
    except ValueError:
        return None


def _listed_json(folder: str, manifest: dict, name: str):
    """A document the manifest lists, checked against its sha256; None when it lists none."""
    from apache_beam.io.filesystems import FileSystems

    from pipeline.publish import PublishError

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
    from apache_beam.io.filesystems import FileSystems

    from pipeline.publish import PublishError, completed_subfolders, read_run

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


def _point(entry: dict, scored: int, misuse: int, legacy: int, alert: bool) -> dict:
    """One night of a series: commit-time and proposal-time misuse with their Wilson 95% intervals."""
    def rate(count):
        return {"count": count, "rate": count / scored if scored else None, "ci95": wilson_interval(count, scored)}

    return {"date": entry["date"], "segment": entry["segment"], "scored": scored, "misuse": rate(misuse),
            "legacy_misuse": rate(legacy), "alert": alert}


def _pooled_agents(metrics: dict) -> dict:
    """agent -> (scored, misuse, legacy): one night's groups pooled over their run_ids, as compare does."""
    agents: dict = {}
    for group in metrics["groups"]:
        pooled = agents.setdefault(group["agent"], [0, 0, 0])
        pooled[0] += group["trajectories"]["scored"]
        pooled[1] += group["misuse"]["count"]
        pooled[2] += group["legacy_misuse"]["count"]
    return agents


def _night_entry(night: dict, previous: dict | None, segment: int) -> dict:
    metrics, manifest, comparison = night["metrics"], night["manifest"], night["comparison"] or {}
    totals = metrics["totals"]["trajectories"]
    reasons = totals["unscored_by_reason"]
    rules = rules_of(metrics)
    baseline = comparison.get("baseline") or {}
    return {
        "date": night["date"], "folder": night["folder"], **rules,
        "rules_changed": rules_changed(rules, rules_of(previous["metrics"])) if previous else [],
        "segment": segment,
        "trajectories": {name: totals[name] for name in ("input", "scored", "unscored")},
        "unscored_share": totals["unscored"] / totals["input"] if totals["input"] else None,
        "unscored_by_reason": {reason: n for reason, n in sorted(reasons.items()) if n},
        "incomplete_input": bool(manifest.get("unreadable_files") or reasons.get("pipeline_error")),
        "compared": bool(comparison),
        "baseline": baseline.get("night") or baseline.get("folder"),
        "compared_across_rules": bool(comparison.get("rules_changed")),
        "regressions": list(comparison.get("regressions") or []),
    }


def trend_document(nights: list, skipped: list = ()) -> dict:
    """trend.json for nights oldest first (read_nights' form)."""
    entries, previous, segment = [], None, 0
    for night in nights:
        if previous is not None and rules_changed(rules_of(night["metrics"]), rules_of(previous["metrics"])):
            segment += 1
        entries.append(_night_entry(night, previous, segment))
        previous = night
    series, totals = {}, []
    for night, entry in zip(nights, entries):
        for agent, (scored, misuse, legacy) in _pooled_agents(night["metrics"]).items():
            series.setdefault(agent, []).append(_point(entry, scored, misuse, legacy, agent in entry["regressions"]))
        whole = night["metrics"]["totals"]
        totals.append(_point(entry, whole["trajectories"]["scored"], whole["misuse"]["count"],
                             whole["legacy_misuse"]["count"], bool(entry["regressions"])))
    by_size = sorted(series, key=lambda agent: (-sum(p["scored"] for p in series[agent]), agent is not None,
                                                agent or ""))
    kept = sorted(by_size[:MAX_AGENTS], key=lambda agent: (agent is not None, agent or ""))
    return {
        "schema": TREND_SCHEMA,
        "nights": entries,
        "skipped": list(skipped),
        "totals": totals,
        "agents": [{"agent": agent, "points": series[agent]} for agent in kept],
        "agents_left": max(0, len(series) - MAX_AGENTS),
    }


def write_trend(root: str, document: dict) -> None:
    """root/trend.json and root/trend.html, each written whole (a new name, then a rename)."""
    from litmus_score.report.trend_page import render_trend
    from transforms.write import to_json, write_whole

    write_whole(root, TREND_FILE, to_json(document).encode("utf-8"))
    write_whole(root, TREND_PAGE, render_trend(document).encode("utf-8"))


def refresh(root: str) -> None:
    """`nightly`'s last step: the trend again, with the night just published. A failure here is
    reported and leaves the night's exit code alone: the night itself is published."""
    from pipeline import text

    try:
        document = trend_document(*read_nights(root))
        write_trend(root, document)
    except Exception as error:  # noqa: BLE001 - the night is published; its trend must not fail it
        print(f"litmus-score: warning: the trend under {text.display(root, 200)} was not refreshed: "
              f"{text.display(error, 1000)}", file=sys.stderr)
        return
    print(f"trend: {len(document['nights'])} night(s) in {text.display(root, 200)}/{TREND_PAGE}")


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="litmus-score trend",
                                     description="The history of nights under an output root of `nightly`: "
                                                 f"writes OUTPUT_ROOT/{TREND_FILE} and OUTPUT_ROOT/{TREND_PAGE}.")
    parser.add_argument("output_root", help="the folder of the nights (local, gs://, ...)")
    parser.add_argument("--nights", type=int, default=DEFAULT_NIGHTS,
                        help=f"the latest N complete nights (default {DEFAULT_NIGHTS})")
    args = parser.parse_args(argv)

    from apache_beam.io.filesystems import FileSystems

    from pipeline import text

    if args.nights < 1:
        print(f"litmus-score: --nights must be positive, got {args.nights}", file=sys.stderr)
        return 2
    root = args.output_root.rstrip("/") or "/"
    nights, skipped = read_nights(root, args.nights)
    for left_out in skipped:
        print(f"warning: {text.display(left_out['folder'], 200)} left out: {text.display(left_out['reason'], 1000)}")
    if not nights:
        print(f"litmus-score: no complete night under {text.display(root, 200)} ({NIGHT_PREFIX}YYYY-MM-DD/ "
              "with _SUCCESS)", file=sys.stderr)
        return 2
    document = trend_document(nights, skipped)
    write_trend(root, document)
    entries = document["nights"]
    alerts = [night["date"] for night in entries if night["regressions"]]
    changes = [night["date"] for night in entries if night["rules_changed"]]
    print(f"trend: {len(entries)} night(s), {entries[0]['date']} to {entries[-1]['date']}; "
          f"alerts: {', '.join(alerts) or 'none'}; rules changed: {', '.join(changes) or 'never'}")
    print(f"wrote {text.display(FileSystems.join(root, TREND_FILE), 300)} and "
          f"{text.display(FileSystems.join(root, TREND_PAGE), 300)}")
    return 0
