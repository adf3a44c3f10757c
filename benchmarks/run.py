"""Throughput benchmark: litmus-score against a DuckDB query doing the same work.

Generates a workload of about --calls tool calls with varied texts and
every defect of the spec (benchmarks/workload.py; kept in --workdir and
reused), then times, as whole processes, --repeat times each:
  * `litmus-score score` writing all its outputs, with the Beam options given
    after `--` (default: DirectRunner's defaults);
  * one DuckDB process running benchmarks/metrics.sql, which computes the
    spec's metrics per (run_id, agent) in commit mode: completeness, JSON
    objects (json_valid and "is an object"), verdicts, realization,
    trajectory verdicts.
It checks that the query's numbers equal metrics.json's, field by field
(exit status 1 if not), and prints medians of wall time, peak RSS and CPU
time, calls per second per core, and the ratio, plus a Markdown table row.

    python benchmarks/run.py --calls 1000000 [--repeat 3] [--workdir DIR] [-- --direct_num_workers=1 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import workload

QUERY = Path(__file__).with_name("metrics.sql")
# Runs the query and prints its rows as JSON: the whole DuckDB process is timed.
DUCKDB_PROCESS = """
import duckdb, json, sys
connection = duckdb.connect()
connection.execute("SET enable_progress_bar = false")
result = connection.execute(sys.argv[1])
names = [column[0] for column in result.description]
print(json.dumps([dict(zip(names, row)) for row in result.fetchall()], default=int))
"""
# metrics.json path -> the query's column, per group.
FIELDS = {
    ("trajectories", "input"): "trajectories_input",
    ("trajectories", "scored"): "trajectories_scored",
    ("trajectories", "unscored"): "trajectories_unscored",
    ("calls", "input"): "calls_input",
    ("calls", "scored"): "calls_scored",
    ("misuse", "count"): "misuse_trajectories",
    ("legacy_misuse", "count"): "legacy_misuse_trajectories",
    ("over_penalized",): "over_penalized",
    ("under_penalized",): "under_penalized",
    ("execution_hallucination", "refused"): "refused",
    ("execution_hallucination", "count"): "execution_hallucination",
}
CATEGORIES = ("misuse", "escalated_misuse", "deescalated", "blocked_attempt", "benign")
REASONS = ("duplicate_trajectory", "schema_version_unsupported", "missing_field", "call_count_mismatch",
           "duplicate_call_id", "steps_out_of_order", "truncated", "too_large", "unscored_calls",
           "malformed_arguments", "no_verdict", "no_commit_context")


def run(command, stdout=subprocess.DEVNULL):
    """(wall seconds, peak RSS MiB, CPU seconds, stdout) of one whole process."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(command, stdout=stdout, stderr=errors)
        output = process.stdout.read() if process.stdout else None
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            errors.seek(0)
            raise SystemExit(f"{command[0]} {command[1][:40]!r}... exited with {process.returncode}:\n"
                             + errors.read().decode(errors="replace")[-2000:])
    # wait4 reports the child and the descendants it waited for; ru_maxrss is in KiB.
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, output


def expected_from_query(row: dict) -> dict:
    """The query's row as the metrics.json fields it must equal."""
    fields = {path: row[column] for path, column in FIELDS.items()}
    fields.update({("calls", "by_category", name): row[name] for name in CATEGORIES})
    fields.update({("trajectories", "unscored_by_reason", name): row[name] for name in REASONS})
    scored = row["trajectories_scored"]
    for name in ("misuse", "legacy_misuse"):
        fields[(name, "rate")] = fields[(name, "count")] / scored if scored else None
    return fields


def differences(metrics: dict, rows: list) -> tuple:
    """(fields compared, [(group, field, metrics.json value, query value)])."""
    groups = {(g["run_id"], g["agent"]): g for g in metrics["groups"]}
    queried = {(r["run_id"], r["agent"]): r for r in rows}
    found = [(key, "group", key in groups, key in queried) for key in sorted(set(groups) ^ set(queried), key=str)]
    compared = 0
    totals = {}
    for key in sorted(set(groups) & set(queried), key=str):
        for path, value in expected_from_query(queried[key]).items():
            if path[-1] != "rate":
                totals[path] = totals.get(path, 0) + value
            actual = groups[key]
            for part in path:
                actual = actual.get(part, 0) if isinstance(actual, dict) else None
            compared += 1
            if not (actual == value or (isinstance(value, float) and abs(actual - value) < 1e-12)):
                found.append((key, ".".join(path), actual, value))
    for path, value in totals.items():
        actual = metrics["totals"]
        for part in path:
            actual = actual.get(part, 0)
        compared += 1
        if actual != value:
            found.append(("totals", ".".join(path), actual, value))
    return compared, found


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ours, beam_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000, help="tool calls in the workload, about")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="keep the workload here and reuse it (default: a temp folder)")
    args = parser.parse_args(ours)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="litmus-bench-"))
    shards = workdir / f"workload-{args.calls}-seed{args.seed}"
    if not (shards / "_COMPLETE").exists():
        shutil.rmtree(shards, ignore_errors=True)  # left by an interrupted generation
        start = time.perf_counter()
        workload.generate(str(shards), args.calls, args.seed)
        (shards / "_COMPLETE").touch()
        print(f"generated {shards} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    pattern = str(shards / "*.parquet")
    query = QUERY.read_text().replace("{shards}", pattern.replace("'", "''"))

    scorer, duck, metrics, rows = [], [], None, None
    for i in range(args.repeat):
        output = workdir / f"out-{i}"
        shutil.rmtree(output, ignore_errors=True)  # left by an interrupted run
        scorer.append(run([sys.executable, "-m", "pipeline", "score", "--input", pattern,
                           "--output", str(output), *beam_args])[:3])
        metrics = metrics or json.loads((output / "metrics.json").read_text())
        shutil.rmtree(output)
        *measured, output_rows = run([sys.executable, "-c", DUCKDB_PROCESS, query], stdout=subprocess.PIPE)
        duck.append(tuple(measured))
        rows = rows or json.loads(output_rows)

    compared, found = differences(metrics, rows)
    calls = metrics["totals"]["calls"]["input"]
    cores = os.cpu_count()

    def summary(samples):
        wall, rss, cpu = (statistics.median(column) for column in zip(*samples))
        return {"seconds": round(wall, 2), "peak_rss_mib": round(rss), "cpu_seconds": round(cpu, 2),
                "calls_per_s_per_core": round(calls / wall / cores), "calls_per_cpu_s": round(calls / cpu),
                "all_seconds": [round(s[0], 2) for s in samples]}

    ours_s, duck_s = summary(scorer), summary(duck)
    ratio = ours_s["seconds"] / duck_s["seconds"]
    print(json.dumps({"tool_calls": calls, "trajectories": metrics["totals"]["trajectories"]["input"],
                      "shards": metrics["inputs"]["files"], "cores": cores, "load_average": os.getloadavg(),
                      "beam_args": beam_args, "runs": args.repeat, "litmus_score": ours_s, "duckdb": duck_s,
                      "ratio": round(ratio, 2),
                      "unscored_by_reason": {reason: count for reason, count in
                                             metrics["totals"]["trajectories"]["unscored_by_reason"].items() if count}},
                     indent=2))
    print(f"| {calls:,} | {metrics['inputs']['files']} | {' '.join(beam_args) or 'defaults'} "
          f"| {ours_s['seconds']:.2f} s | {ours_s['peak_rss_mib']} MiB | {ours_s['calls_per_s_per_core']:,} "
          f"| {duck_s['seconds']:.2f} s | {duck_s['peak_rss_mib']} MiB | {duck_s['calls_per_s_per_core']:,} "
          f"| **{ratio:.2f}x** | {os.getloadavg()[0]:.1f} |")
    if found:
        print(f"check FAILED: {len(found)} of {compared} fields differ", file=sys.stderr)
        for difference in found[:50]:
            print("  ", *difference, file=sys.stderr)
        sys.exit(1)
    print(f"check: DuckDB and metrics.json agree on all {compared} fields "
          f"({len(rows)} groups and the totals)", file=sys.stderr)
    if not args.workdir:
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
