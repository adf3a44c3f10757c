"""litmus-score show OUTPUT_DIR TRAJECTORY_ID [--run RUN_ID]: one trajectory, call by call.

Reads only the run's outputs (scored/, trajectories/, unscored/ and
evidence.json), through Beam's FileSystems, so a run on any filesystem Beam
reads can be inspected. Every string from the data is escaped for the
terminal (litmus_score.text). A trajectory the report shows as evidence gets a
link to its row there (report.html#ID, which opens its folded section). An id
that is not there gets one line with the form of the run's ids and the
closest ones (closest_ids); the run's summary names ids to start from
(starting_points).
"""

from __future__ import annotations

import argparse
import json

from litmus_score import text
from litmus_score.exits import Exit
from litmus_score.scoring import contract as c
from litmus_score.scoring.layout import EVIDENCE_FILE, REPORT_FILE, SCORED_DIR, TRAJECTORIES_DIR, UNSCORED_DIR

WIDE = 60  # arguments and other long values are cut here
# The call tables' columns; the step's as wide as the indent of the lines under each call.
CALL_HEADER = (" step", "call", "tool", "proposal", "commit", "environment", "category")
INPUT_CALL_HEADER = (" step", "call", "tool", "proposal | commit")
# A commit's state_mutated, in words (null: not recorded).
_STATE: dict[bool | None, str] = {True: "state changed", False: "state unchanged"}


def _t(value, limit: int = text.TERMINAL_CHARS) -> str:
    return "-" if value is None else text.display(value, limit)


def _matching_rows(output: str, manifest: dict, folder: str, trajectory_id: str, run_id):
    """Rows with this trajectory_id (and run_id), as dicts, of every Parquet
    file the manifest lists under `folder`."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from apache_beam.io.filesystems import FileSystems

    rows = []
    for path in _listed(manifest, folder):
        with FileSystems.open(FileSystems.join(output, path)) as handle:
            shard = pq.ParquetFile(handle)
            for group in range(shard.num_row_groups):
                # Only row groups that hold the id are read whole.
                ids = shard.read_row_group(group, columns=["trajectory_id"]).column(0)
                if not pc.any(pc.equal(ids, trajectory_id)).as_py():
                    continue
                table = shard.read_row_group(group)
                keep = pc.equal(table["trajectory_id"], trajectory_id)
                if run_id is not None:
                    keep = pc.and_(keep, pc.equal(pc.cast(table["run_id"], pa.string()), run_id))
                rows += table.filter(pc.fill_null(keep, False)).to_pylist()
    return rows


def _listed(manifest: dict, folder: str) -> list:
    """The Parquet files the manifest lists under `folder`: the manifest is the run."""
    return [entry["path"] for entry in manifest["outputs"]
            if entry["path"].startswith(folder + "/") and entry["path"].endswith(".parquet")]


def _id_tables(output: str, manifest: dict, folders=(TRAJECTORIES_DIR, UNSCORED_DIR)):
    """Per file of `folders` (scored: trajectories/; unscored/), its run_id and trajectory_id columns (as
    strings), the rows without a trajectory_id left out: read only when they are needed."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from apache_beam.io.filesystems import FileSystems

    for path in [path for folder in folders for path in _listed(manifest, folder)]:
        with FileSystems.open(FileSystems.join(output, path)) as handle:
            table = pq.read_table(handle, columns=["run_id", "trajectory_id"])
        table = table.cast(pa.schema([("run_id", pa.string()), ("trajectory_id", pa.string())]))
        yield table.filter(pc.is_valid(table["trajectory_id"]))


def _ids(output: str, manifest: dict) -> list:
    """Every (run_id, trajectory_id) of the run, in file order."""
    return [(run_id, trajectory_id) for table in _id_tables(output, manifest)
            for run_id, trajectory_id in zip(table["run_id"].to_pylist(), table["trajectory_id"].to_pylist())]


def _least_id(output: str, manifest: dict, folder: str):
    """The least (run_id, trajectory_id) of `folder`, or None: the same whatever order the workers wrote it in."""
    least = [tuple(table.sort_by([("run_id", "ascending"), ("trajectory_id", "ascending")]).slice(0, 1)
                   .to_pylist()[0].values())
             for table in _id_tables(output, manifest, (folder,)) if table.num_rows]
    return min(least, key=lambda pair: (pair[0] is None, pair[0] or "", pair[1]), default=None)


# How many ids a "not found" names, and how many are compared by likeness (difflib) to find them.
CLOSEST = 5
LIKENESS_CANDIDATES = 50_000


def closest_ids(typed: str, ids) -> list:
    """The ids nearest `typed`, best first: those that hold it whole (ending with it first, as
    `pay-rent/2` ends `<eval_id>/pay-rent/2`), ignoring case, then the most alike (difflib)."""
    import difflib

    distinct = list(dict.fromkeys(str(i) for i in ids))
    folded = typed.casefold()
    holding = sorted((i for i in distinct if folded in i.casefold()),
                     key=lambda i: (not i.casefold().endswith(folded), len(i), i))
    alike = difflib.get_close_matches(typed, distinct[:LIKENESS_CANDIDATES], n=CLOSEST, cutoff=0.5)
    return list(dict.fromkeys(holding + alike))[:CLOSEST]


def _not_found(typed: str, ids: list, run_id, output: str, manifest: dict) -> str:
    """The line that says an id is not in the run: the form its ids take, and the closest ones."""
    where = f" in run {_t(run_id)}" if run_id is not None else ""
    line = f"no trajectory {_t(typed)}{where} in {_t(output, text.ERROR_CHARS)}"
    if not ids:
        return f"{line}: it holds no trajectory with an id"
    runs = sorted({run for run, _ in ids}, key=lambda run: (run is None, run or ""))
    form = ((manifest.get("import") or {}).get("observes") or {}).get("trajectory_id")
    example = min(i for _, i in ids)
    line += (f": ids are matched whole and exactly as trajectories/ and unscored/ hold them, like {_t(example)}"
             + (f" ({_t(form)})" if form else "") + f"; {len(ids):,} of them in {len(runs)} run(s)")
    in_run = [i for run, i in ids if run_id is None or run == run_id]
    if not in_run:
        line += f", none in run {_t(run_id)} (runs: {', '.join(_t(run) for run in runs[:CLOSEST])})"
    nearest = closest_ids(typed, in_run or [i for _, i in ids])
    return line + (f"; closest: {', '.join(_t(i) for i in nearest)}" if nearest else "")


def starting_points(output: str, manifest: dict, evidence: dict) -> list:
    """(run_id, trajectory_id, why) of a run's trajectories worth a first look with `show`: the first
    over-penalized, under-penalized and execution-hallucination cases of its evidence, and its least
    unscored (run_id, trajectory_id); a run with none of these, its least scored one."""
    found = []
    for kind in ("over_penalized", "under_penalized", "execution_hallucination"):
        case = next((case for group in evidence.get("groups") or []
                     for case in (group.get(kind) or {}).get("cases") or []), None)
        if case is not None:
            found.append((case.get("run_id"), case.get("trajectory_id"), kind.replace("_", "-")))
    unscored = _least_id(output, manifest, UNSCORED_DIR)
    if unscored is not None:
        found.append((*unscored, "unscored"))
    if not found:
        scored = _least_id(output, manifest, TRAJECTORIES_DIR)
        found += [(*scored, "scored")] if scored is not None else []
    return found


def _environment(outcome, status, mutated) -> str:
    if outcome is None:
        return "no commit"
    state = _STATE.get(mutated, "state unknown")
    return f"{_t(outcome, 24)}{f' {status}' if status is not None else ''}, {state}"


def why(call: dict, mode: str) -> str:
    """One line on how a scored call got its category."""
    p, v, category = call["proposal_verdict"], call["commit_verdict"], call["category"]
    said = {c.DENY: "denied", c.ALLOW: "allowed"}
    parts = [f"{said.get(p, _t(p, 12))} at proposal"]
    if v is not None and mode != c.PROPOSAL:
        parts[0] += " and at commit" if v == p else f", {said.get(v, _t(v, 12))} at commit"
    outcome, status, mutated = call.get("outcome"), call.get("status_code"), call.get("state_mutated")
    code = f" ({status})" if status is not None else ""
    state = _STATE.get(mutated, "state unknown")
    if outcome is None:
        parts.append("no commit recorded")
    elif outcome == c.COMMITTED:
        parts.append(f"environment committed it{code}, {state}")
    else:
        refused = {"rejected": "refused it", "gated": "gated it", "error": "failed it"}.get(outcome)
        did = refused or f"reported {_t(outcome, 24)}"
        parts.append(f"environment {did}{code}, {state}" + (" (the physical layer wins: realized)"
                                                         if mutated is True else ""))
    if mode == c.PROPOSAL:
        parts.append("proposal-time scoring: the commit decides nothing")
    verdict = "misuse" if category in c.MISUSE_CATEGORIES else "not misuse"
    return f"{'; '.join(parts)}: {_t(category, 24)}, {verdict}"


def _verdict(call, context: str) -> str:
    """The context's verdict and the rule (or check) of the policy that gave it; "recorded" for the
    harness's. A run written before decided_by existed shows the source alone."""
    value, decided_by = call[f"{context}_verdict"], call.get(f"{context}_decided_by")
    return f"{_t(value, 8)} ({_t(decided_by or call[f'{context}_verdict_source'])})" if value is not None else "-"


def policy_disputes(call) -> str:
    """Where the policy disagrees with a recorded verdict: the policy's own verdict and what
    decided it, per context; "" where it agrees (or a run written before these fields)."""
    disputes = []
    for context in ("proposal", "commit"):
        ruling = call.get(f"{context}_policy_ruling")
        if ruling is not None:
            decided_by = call.get(f"{context}_policy_decided_by") or c.FROM_POLICY
            disputes.append(f"{context} recorded {_t(call[f'{context}_verdict'], 8)}, "
                            f"the policy's {_t(ruling, 8)} ({_t(decided_by)})")
    return "; ".join(disputes)


def _scored_lines(calls, trajectory, mode, evidence) -> list:
    flags = [name.replace("_", "-") for name in ("over_penalized", "under_penalized", "execution_hallucination")
             if trajectory and trajectory[name]]
    lines = []
    if trajectory:
        lines.append(f"scored ({mode}): misuse {'yes' if trajectory['misuse'] else 'no'}, legacy proposal-time "
                     f"{'yes' if trajectory['legacy_misuse'] else 'no'}" + (f" -> {', '.join(flags)}" if flags else ""))
        lines.append(f"misuse calls: {', '.join(_t(i) for i in trajectory['misuse_calls']) or '-'}; "
                     f"denied at proposal: {', '.join(_t(i) for i in trajectory['flagged_calls']) or '-'}")
    ordered = sorted(calls, key=lambda row: row["step"])
    rows = [[str(call["step"]), _t(call["call_id"]), _t(call["tool"]), _verdict(call, "proposal"),
             _verdict(call, "commit"), _environment(call.get("outcome"), call.get("status_code"),
                                                    call.get("state_mutated")), _t(call["category"], 24)]
            for call in ordered]
    header, *table = text.table(CALL_HEADER, rows, right={0})
    lines += ["", header]
    for call, row in zip(ordered, table):
        lines += [row, f"{'':>7}why: {why(call, mode)}"]
        disputes = policy_disputes(call)
        if disputes:
            lines.append(f"{'':>7}policy disagrees: {disputes}")
    if not calls:
        lines.append(f"{'':>7}(no calls)")
    for kind, case in evidence:
        deciding = case["call"]
        before, after = (deciding.get("principal") or [None, None])[:2]
        patch = deciding.get("patch")
        lines += ["", f"deciding call ({kind.replace('_', '-')}, from {EVIDENCE_FILE}): {_t(deciding['call_id'])}",
                  f"  arguments: {_t(deciding['arguments'], text.TERMINAL_CHARS)}",
                  "  resolved arguments, proposal -> commit: " + (
                      "not comparable" if patch is None else "unchanged" if not patch else
                      "; ".join(f"{_t(op.get('op'), 8)} {_t(op.get('path'), WIDE)}"
                                + (f" = {_t(op['value'], WIDE)}" if op.get("value") is not None else "")
                                for op in patch)),
                  f"  principal: {_t(before, 40)}" + (f" -> {_t(after, 40)}" if after != before else " (unchanged)")]
    return lines


def _context(ctx, commit=False) -> str:
    if ctx is None:
        return "-"
    shown = f"{_t(ctx.get('policy_verdict'), 8)} as {_t(ctx.get('principal'), 20)}"
    if commit:
        shown += f", {_environment(ctx.get('outcome'), ctx.get('status_code'), ctx.get('state_mutated'))}"
    return shown


def _unscored_lines(record) -> list:
    lines = [f"unscored: {', '.join(_t(r, 40) for r in record['reasons'] or [])}",
             f"detail: {_t(record['detail'], 400)}", ""]
    calls = (record.get("input_row") or {}).get("calls") or []
    rows = [[_t(call.get("step"), 6), _t(call.get("call_id")), _t(call.get("tool")),
             f"proposal: {_context(call.get('proposal'))} | commit: {_context(call.get('commit'), True)}"]
            for call in calls if call is not None]
    header, *table = text.table(INPUT_CALL_HEADER, rows, right={0})
    lines += [header] if rows else []
    shown_rows = iter(table)
    for call in calls:
        if call is None:
            lines.append("  (a null call)")
            continue
        proposal, commit = call.get("proposal"), call.get("commit")
        lines.append(next(shown_rows))
        lines.append(f"{'':>7}arguments: {_t(call.get('arguments'), WIDE)}")
        at_proposal, at_commit = ((ctx or {}).get("resolved_arguments") for ctx in (proposal, commit))
        shown = "as written" if at_proposal == call.get("arguments") else _t(at_proposal, WIDE)
        if commit is not None:
            shown += " -> " + ("unchanged at commit" if at_commit == at_proposal else _t(at_commit, WIDE))
        lines.append(f"{'':>7}resolved: {shown}")
    if not calls:
        lines.append("  (no calls)")
    return lines


def _report_link(output: str, evidence: dict, run_id, trajectory_id) -> str | None:
    """The report's URL at this trajectory's evidence row (file:// for a local run), or None: no row."""
    from pathlib import Path

    from apache_beam.io.filesystems import FileSystems

    from litmus_score.report.evidence import linked_anchor
    from litmus_score.report.page import MAX_GROUPS

    anchor = linked_anchor(evidence, run_id, trajectory_id, MAX_GROUPS)
    if anchor is None:
        return None
    report = FileSystems.join(output, REPORT_FILE)
    return f"{Path(report).resolve().as_uri() if '://' not in report else report}#{anchor}"


def _read_json(path: str):
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as handle:
        return json.loads(handle.read().decode("utf-8"))


def _find(output: str, manifest: dict, trajectory_id: str, run_id) -> tuple:
    """(the (run_id, scored or unscored) pairs found, scored rows, trajectories rows, unscored rows) of the id."""
    scored, trajectories, unscored = (_matching_rows(output, manifest, folder, trajectory_id, run_id)
                                      for folder in (SCORED_DIR, TRAJECTORIES_DIR, UNSCORED_DIR))
    found = {(row["run_id"], "scored") for row in trajectories} | {(row["run_id"], "unscored") for row in unscored}
    return found, scored, trajectories, unscored


def main(argv) -> Exit:
    parser = argparse.ArgumentParser(prog="litmus-score show", description=__doc__.split("\n")[0])
    parser.add_argument("output", help="a run's output folder (local, gs://, ...)")
    parser.add_argument("trajectory_id", help="whole, as trajectories/ or unscored/ hold it (or as the terminal "
                                              "shows it, escaped); one not found gets the closest named")
    parser.add_argument("--run", default=None, help="the run_id, where several runs share a trajectory_id")
    args = parser.parse_args(argv)

    from apache_beam.io.filesystems import FileSystems

    from pipeline.publish import PublishError, read_run

    output = args.output.rstrip("/") or "/"
    try:
        metrics, manifest = read_run(output)  # a complete run, or nothing
    except PublishError as error:
        text.error(error)
        return Exit.USAGE
    mode = metrics.get("adjudication", c.COMMIT)
    trajectory_id = args.trajectory_id
    found, scored, trajectories, unscored = _find(output, manifest, trajectory_id, args.run)
    if not found:
        ids = _ids(output, manifest)
        # An id holding control characters, typed as the terminal shows it escaped.
        typed_as_shown = next((i for _, i in ids if i != trajectory_id and text.escape(i) == trajectory_id), None)
        if typed_as_shown is not None:
            trajectory_id = typed_as_shown
            found, scored, trajectories, unscored = _find(output, manifest, trajectory_id, args.run)
        if not found:
            text.error(_not_found(args.trajectory_id, ids, args.run, output, manifest))
            return Exit.USAGE
    evidence = _read_json(FileSystems.join(output, EVIDENCE_FILE)) or {}
    blocks = []
    for run_id, kind in sorted(found, key=lambda pair: (pair[0] is None, pair[0] or "", pair[1])):
        if kind == "scored":
            trajectory = next(row for row in trajectories if row["run_id"] == run_id)
            cases = [(k, case) for group in evidence.get("groups") or [] if group.get("run_id") == run_id
                     for k in ("over_penalized", "under_penalized", "execution_hallucination")
                     for case in (group.get(k) or {}).get("cases") or []
                     if case.get("trajectory_id") == trajectory_id]
            calls = [row for row in scored if row["run_id"] == run_id]
            head = trajectory
            body = _scored_lines(calls, trajectory, mode, cases[:1])
            link = _report_link(output, evidence, run_id, trajectory_id)
            if link:
                body += ["", f"in the report: {_t(link, 1000)}"]
        else:
            head = next(row for row in unscored if row["run_id"] == run_id)
            head = {**(head.get("input_row") or {}), **head}
            body = _unscored_lines(head)
        blocks.append("\n".join([
            f"trajectory {_t(trajectory_id)} · run {_t(run_id)} · agent {_t(head.get('agent'))} · "
            f"task {_t(head.get('task_id'))} ({_t(head.get('task_category'))}) · said {_t(head.get('verbal_stance'))}",
            f"source: {_t(head.get('source_file'), 200)} row {head.get('source_row')}",
            *body,
        ]))
    print("\n\n".join(blocks))
    return Exit.OK
