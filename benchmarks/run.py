"""Throughput benchmark: litmus-score against a DuckDB query doing the same work.

Generates a workload of about --calls tool calls with varied texts and
every defect of the spec (benchmarks/workload.py; kept in --workdir and
reused): `varied` carries recorded verdicts and re-serialized arguments as
harness logs do, `imported` is shaped like logs brought in by an importer
(no recorded verdicts; argument texts written by one serializer, so a
commit's text is its proposal's byte for byte unless the call changed).
Then it times, as whole processes, --repeat times each, in turn:
  * `litmus-score score --policy FILE` writing all its outputs, with the Beam
    options given after `--` (default: DirectRunner's defaults);
  * one DuckDB process running benchmarks/metrics.sql with the same policy
    in SQL (benchmarks/policy.sql, configs/policy.yaml written by hand),
    which computes the spec's metrics per (run_id, agent) in commit mode:
    completeness, JSON objects (json_valid and "is an object"), verdicts
    (recorded, else the policy's), realization, trajectory verdicts, policy
    disagreements;
  * with --without-policy-too, both again without a policy.
It checks that each query's numbers equal its run's metrics.json, field by
field (exit status 1 if not), and prints medians of wall time, peak RSS and
CPU time, calls per second per core and the ratios, plus a Markdown row each.

    python benchmarks/run.py --calls 1000000 [--repeat 3] [--workdir DIR] [--workload varied|imported]
        [--policy FILE|none] [--without-policy-too] [-- --direct_num_workers=1 ...]
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

HERE = Path(__file__).parent
QUERY = HERE / "metrics.sql"
# configs/policy.yaml, and the query's copy of it in SQL.
POLICY, POLICY_SQL, NO_POLICY_SQL = HERE.parent / "configs" / "policy.yaml", HERE / "policy.sql", HERE / "no_policy.sql"
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
    ("policy_disagreements",): "policy_disagreements",
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


def summary(samples, calls: int, cores: int) -> dict:
    wall, rss, cpu = (statistics.median(column) for column in zip(*samples))
    return {"seconds": round(wall, 2), "peak_rss_mib": round(rss), "cpu_seconds": round(cpu, 2),
            "calls_per_s_per_core": round(calls / wall / cores), "calls_per_cpu_s": round(calls / cpu),
            "all_seconds": [round(s[0], 2) for s in samples], "all_cpu_seconds": [round(s[2], 2) for s in samples]}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ours, beam_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000, help="tool calls in the workload, about")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="keep the workload here and reuse it (default: a temp folder)")
    parser.add_argument("--workload", choices=("varied", "imported"), default="varied")
    parser.add_argument("--policy", default=str(POLICY),
                        help="policy file for litmus-score (default configs/policy.yaml, which benchmarks/policy.sql "
                             "states in SQL), or `none`")
    parser.add_argument("--without-policy-too", action="store_true",
                        help="also time both without a policy, in the same alternation")
    args = parser.parse_args(ours)
    policies = [] if args.policy == "none" else [args.policy]
    if args.without_policy_too or not policies:
        policies.append(None)
    if any(policy not in (None, str(POLICY)) for policy in policies):
        print("note: benchmarks/policy.sql states configs/policy.yaml; the check fails for another policy",
              file=sys.stderr)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="litmus-bench-"))
    shards = workdir / (f"workload-{args.calls}-seed{args.seed}" if args.workload == "varied"
                        else f"imported-{args.calls}-seed{args.seed}")
    if not (shards / "_COMPLETE").exists():
        shutil.rmtree(shards, ignore_errors=True)  # left by an interrupted generation
        start = time.perf_counter()
        workload.generate(str(shards), args.calls, args.seed, imported=args.workload == "imported")
        (shards / "_COMPLETE").touch()
        print(f"generated {shards} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    pattern = str(shards / "*.parquet")

    def query(policy):
        rules = (POLICY_SQL if policy else NO_POLICY_SQL).read_text()
        return QUERY.read_text().replace("{policy}", rules).replace("{shards}", pattern.replace("'", "''"))

    load = [os.getloadavg()]
    times = {policy: ([], []) for policy in policies}
    metrics, rows = {}, {}
    for i in range(args.repeat):
        for policy in policies:
            output = workdir / f"out-{i}"
            shutil.rmtree(output, ignore_errors=True)  # left by an interrupted run
            flags = ["--policy", policy] if policy else []
            times[policy][0].append(run([sys.executable, "-m", "pipeline", "score", "--input", pattern,
                                         "--output", str(output), *flags, *beam_args])[:3])
            metrics.setdefault(policy, json.loads((output / "metrics.json").read_text()))
            shutil.rmtree(output)
            *measured, output_rows = run([sys.executable, "-c", DUCKDB_PROCESS, query(policy)], stdout=subprocess.PIPE)
            times[policy][1].append(tuple(measured))
            rows.setdefault(policy, json.loads(output_rows))
            load.append(os.getloadavg())

    cores = os.cpu_count()
    failed = False
    report = {"workload": args.workload, "cores": cores, "beam_args": beam_args, "runs": args.repeat,
              "load_average_1min": [round(sample[0], 2) for sample in load], "by_policy": {}}
    for policy in policies:
        calls = metrics[policy]["totals"]["calls"]["input"]
        ours_s, duck_s = (summary(samples, calls, cores) for samples in times[policy])
        report["by_policy"][policy or "none"] = {
            "tool_calls": calls, "trajectories": metrics[policy]["totals"]["trajectories"]["input"],
            "shards": metrics[policy]["inputs"]["files"], "litmus_score": ours_s, "duckdb": duck_s,
            "ratio": round(ours_s["seconds"] / duck_s["seconds"], 2),
            "cpu_ratio": round(ours_s["cpu_seconds"] / duck_s["cpu_seconds"], 2),
            "unscored_by_reason": {reason: count for reason, count in
                                   metrics[policy]["totals"]["trajectories"]["unscored_by_reason"].items() if count}}
        compared, found = differences(metrics[policy], rows[policy])
        if found:
            failed = True
            print(f"check FAILED ({policy or 'no policy'}): {len(found)} of {compared} fields differ", file=sys.stderr)
            for difference in found[:50]:
                print("  ", *difference, file=sys.stderr)
        else:
            print(f"check ({policy or 'no policy'}): DuckDB and metrics.json agree on all {compared} fields "
                  f"({len(rows[policy])} groups and the totals)", file=sys.stderr)
    if len(policies) == 2:
        with_policy, without = (report["by_policy"][p or "none"] for p in policies)
        report["policy_cost"] = {name: round(with_policy[name]["seconds"] / without[name]["seconds"], 3)
                                 for name in ("litmus_score", "duckdb")}
        # Per call and context: both contexts of every call are put to the policy.
        report["policy_cpu_us_per_call_and_context"] = round(
            (with_policy["litmus_score"]["cpu_seconds"] - without["litmus_score"]["cpu_seconds"])
            / (2 * with_policy["tool_calls"]) * 1e6, 2)
    print(json.dumps(report, indent=2))
    for policy in policies:
        entry = report["by_policy"][policy or "none"]
        ours_s, duck_s = entry["litmus_score"], entry["duckdb"]
        print(f"| {entry['tool_calls']:,} | {args.workload} | {'policy' if policy else 'none'} "
              f"| {ours_s['seconds']:.2f} s | {ours_s['cpu_seconds']:.1f} | {ours_s['peak_rss_mib']} MiB "
              f"| {duck_s['seconds']:.2f} s | {duck_s['cpu_seconds']:.1f} | {duck_s['peak_rss_mib']} MiB "
              f"| **{entry['ratio']:.2f}x** | {max(sample[0] for sample in load):.1f} |")
    if failed:
        sys.exit(1)
    if not args.workdir:
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
