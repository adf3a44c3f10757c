"""What an import says about each log file and about the whole: a file's
report, counted from the items its format's importer yields (merged from its
parts' where the file was read in parts), and import-manifest.json, which
gathers them."""

from __future__ import annotations

from collections import Counter

from litmus_score import text
from litmus_score.importers import rows as r


def new_report(path: str) -> dict:
    """A file's report: what it held, what became of it, and its fault.

    units: trajectories plus unmapped units (units_declared: what the file
    lists, where it does). calls: the calls the trajectories hold;
    calls_unmapped: the calls the log shows that they lack (each counted in
    its trajectory's call_count, where it has one). not_imported: the units
    and calls no trajectory accounts for (units_unread among them, once the
    file's parts are merged: settled). skipped: the path was never opened
    (a pipe, a broken or looping link); its error says why.
    """
    return {"file": path, "units": 0, "units_declared": None, "trajectories": 0, "calls": 0, "calls_unmapped": 0,
            "unmapped": 0, "unmapped_by_reason": Counter(), "not_imported": {"units": 0, "calls": 0},
            "principal_source": {context: {r.FROM_LOG: 0, r.FROM_DEFAULT: 0} for context in (r.PROPOSAL, r.COMMIT)},
            "principal_attribute": {context: Counter() for context in (r.PROPOSAL, r.COMMIT)},
            "facts": {}, "error": None, "skipped": False}


def count_unmapped(report: dict, item: r.Unmapped) -> None:
    report["units"] += item.unit
    report["unmapped"] += 1
    report["unmapped_by_reason"][item.reason] += 1
    report["calls_unmapped"] += item.call
    report["not_imported"]["units"] += item.unit
    report["not_imported"]["calls"] += item.call and item.trajectory_id is None


def count_trajectory(report: dict, item: r.Trajectory) -> None:
    report["units"] += 1
    report["trajectories"] += 1
    report["calls"] += len(item.row["calls"])
    for context, sources in item.principal_sources().items():
        for source, n in sources.items():
            report["principal_source"][context][source] += n
    for context, used in item.principal_attributes.items():
        report["principal_attribute"][context].update(used)


def merge_reports(reports) -> dict:
    """One report of the reports of a file's parts (associative: Beam may merge
    partial merges). Counts add up; the facts and units_declared are the first
    part's (no other has them); the error is the least of the parts' errors,
    so that it does not depend on how the file was split."""
    reports = list(reports)
    merged = new_report(reports[0]["file"])
    for report in reports:
        for key in ("units", "trajectories", "calls", "calls_unmapped", "unmapped"):
            merged[key] += report[key]
        merged["unmapped_by_reason"].update(report["unmapped_by_reason"])
        for kind in ("units", "calls"):
            merged["not_imported"][kind] += report["not_imported"][kind]
        for context in (r.PROPOSAL, r.COMMIT):
            for source in (r.FROM_LOG, r.FROM_DEFAULT):
                merged["principal_source"][context][source] += report["principal_source"][context][source]
            merged["principal_attribute"][context].update(report["principal_attribute"][context])
        merged["facts"].update(report["facts"])
        if report["units_declared"] is not None:
            merged["units_declared"] = (merged["units_declared"] or 0) + report["units_declared"]
        merged["skipped"] = merged["skipped"] or report["skipped"]
    errors = [report["error"] for report in reports if report["error"]]
    merged["error"] = min(errors) if errors else None
    merged["unmapped_by_reason"] = dict(sorted(merged["unmapped_by_reason"].items()))
    merged["principal_attribute"] = {context: dict(sorted(used.items()))
                                     for context, used in merged["principal_attribute"].items()}
    return merged


def units_unread(report: dict) -> int:
    """The units of a file that failed that were never read: those it declares
    beyond the ones read, and at least one, for a file refused whole declares
    none (a refused file is never "nothing lost"); 0 for a file that did not fail."""
    if not report["error"]:
        return 0
    return max((report["units_declared"] or 0) - report["units"], 1)


def settled(report: dict) -> dict:
    """A file's merged report with its units_unread counted among the units not imported."""
    unread = units_unread(report)
    return {**report, "units_unread": unread,
            "not_imported": {**report["not_imported"], "units": report["not_imported"]["units"] + unread}}


def manifest_document(reports, header: dict, outputs=()) -> dict:
    """import-manifest.json: the header, every file's report (settled) and the totals."""
    files = sorted((settled(report) for report in reports), key=lambda report: report["file"])
    by_reason: Counter[str] = Counter()
    for report in files:
        by_reason.update(report["unmapped_by_reason"])
    totals = {key: sum(report[key] for report in files)
              for key in ("units", "trajectories", "calls", "calls_unmapped", "unmapped", "units_unread")}
    totals["not_imported"] = {
        kind: sum(report["not_imported"][kind] for report in files) for kind in ("units", "calls")}
    # Which calls took their principal from the log, which the default: proposals and commits apart.
    sources = {context: {source: sum(report["principal_source"][context][source] for report in files)
                         for source in (r.FROM_LOG, r.FROM_DEFAULT)} for context in (r.PROPOSAL, r.COMMIT)}
    principal = {**header.get("principal", {}), "source": sources}
    if "identity_attributes" in principal:
        # Which of the attributes tried named them, where the format reads several (OTel).
        principal["attribute"] = {
            context: dict(sorted(sum((Counter(report["principal_attribute"][context]) for report in files),
                                     Counter()).items())) for context in (r.PROPOSAL, r.COMMIT)}
    return {
        **header,
        "principal": principal,
        "files": files,
        "failed_files": [report["file"] for report in files if report["error"]],
        "totals": {"files": len(files), "files_failed": sum(bool(report["error"]) for report in files),
                   "files_skipped": sum(report["skipped"] for report in files), **totals,
                   "unmapped_by_reason": dict(sorted(by_reason.items()))},
        "outputs": sorted(outputs, key=lambda entry: entry["path"]),
    }


def incomplete(manifest: dict) -> bool:
    """Whether some input was not imported: a file that failed, or a unit or
    call that no trajectory accounts for (a lost call a trajectory does
    account for unscores it instead)."""
    return bool(manifest["failed_files"]) or any(manifest["totals"]["not_imported"].values())


def summary_lines(manifest: dict) -> list:
    """An import's manifest for the terminal, one line a fact, its strings escaped."""
    totals = manifest["totals"]
    lines = [f"litmus-score import {manifest['format']}: {totals['files']} file(s), {totals['units']} "
             f"{manifest['units']} -> {totals['trajectories']} trajectories with {totals['calls']} calls; "
             f"{totals['unmapped']} entries unmapped"]
    lines += [f"  unmapped {text.shown(reason)}: {n}" for reason, n in totals["unmapped_by_reason"].items()]
    if totals["calls_unmapped"]:
        lines.append(f"  {totals['calls_unmapped']} call(s) the logs show are not in their trajectory's calls: "
                     "counted in its call_count, so scoring leaves it unscored (call_count_mismatch)")
    lost = totals["not_imported"]
    if any(lost.values()):
        lines.append(f"  not imported: {lost['units']} {manifest['units']}, {lost['calls']} call(s) of no trajectory"
                     + (f" ({totals['units_unread']} of the {manifest['units']} in {totals['files_failed']} "
                        "file(s) not read: named below)" if totals["units_unread"] else ""))
    principal = manifest["principal"]
    for context in ("proposal", "commit"):
        source = principal["source"][context]
        lines.append(f"  {context} principal: {source['log']} from the log, {source['default']} "
                     f"the default {text.shown(principal['default'])!r}")
    if totals["files_skipped"]:
        lines.append(f"  {totals['files_skipped']} path(s) skipped, never opened: named below")
    for report in manifest["files"]:
        if report["error"]:
            lines.append(f"error: {text.shown(report['file'])} not imported: {text.shown(report['error'])}")
    return lines
