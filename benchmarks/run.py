"""Throughput benchmark: litmus-score against a DuckDB query doing the same work.

Generates a workload of about --calls tool calls (several scales: 1000000,10000000) with varied texts and
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
  * with --without-policy-too, both again without a policy;
  * with --startup, first `litmus-score --help` and scoring the demo's 1,200
    trajectories (no policy, as `litmus-score demo`).
It checks that each query's numbers equal its run's metrics.json, field by
field (exit status 1 if not), and prints medians of wall time, peak RSS and
CPU time, calls per second per core and the ratios, a Markdown row each, and
issue 37's targets, met or not, for what the round measured (`make bench`).

    python benchmarks/run.py --calls 1000000[,10000000] [--repeat 3] [--workdir DIR] [--workload varied|imported]
        [--policy FILE|none] [--without-policy-too] [--startup] [-- --direct_num_workers=1 ...]
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
# Writes a workload's shards: directory, calls, seed, kind (the demo's 1,200 trajectories as `litmus-score demo`
# writes them, or benchmarks/workload.py's).
GENERATE = """
import sys
directory, calls, seed, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if kind == "demo":
    from litmus_score.synthetic import generate
    generate(directory, shards=4, seed=seed, profile="reference-1200")
else:
    import workload
    workload.generate(directory, calls, seed, imported=kind == "imported")
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


# Issue 37's targets, checked on what a round measured: (what, limit, how it is read).
MB = 1e6 / 2**20  # MiB in a megabyte
STARTUP_S, HELP_S, RSS_MIB_AT_10M, NO_POLICY_RATIO_AT_10M = 2.0, 0.5, 600 * MB, 0.8


def prepare(workdir: Path, calls: int, seed: int, kind: str) -> str:
    """The glob of a workload's shards in `workdir`, generated once and reused."""
    names = {"varied": f"workload-{calls}", "imported": f"imported-{calls}", "demo": "demo-1200"}
    shards = workdir / f"{names[kind]}-seed{seed}"
    if not (shards / "_COMPLETE").exists():
        shutil.rmtree(shards, ignore_errors=True)  # left by an interrupted generation
        start = time.perf_counter()
        # In a process of its own: a child's peak RSS counts this one's at the fork, which stays small.
        subprocess.run([sys.executable, "-c", GENERATE, str(shards), str(calls), str(seed), kind], check=True,
                       cwd=HERE)
        (shards / "_COMPLETE").touch()
        print(f"generated {shards} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return str(shards / "*.parquet")


def query(pattern: str, policy) -> str:
    rules = (POLICY_SQL if policy else NO_POLICY_SQL).read_text()
    return QUERY.read_text().replace("{policy}", rules).replace("{shards}", pattern.replace("'", "''"))


def bench(pattern: str, policies: list, repeat: int, beam_args: list, workdir: Path, load: list) -> dict:
    """Times litmus-score and the query over `pattern`, `repeat` times in turn
    for each policy; checks each policy's metrics.json against its query
    (exit 1 at the end if they differ). {policy or "none": its entry}."""
    times = {policy: ([], []) for policy in policies}
    metrics, rows = {}, {}
    for i in range(repeat):
        for policy in policies:
            output = workdir / f"out-{i}"
            shutil.rmtree(output, ignore_errors=True)  # left by an interrupted run
            flags = ["--policy", policy] if policy else []
            times[policy][0].append(run([sys.executable, "-m", "pipeline", "score", "--input", pattern,
                                         "--output", str(output), *flags, *beam_args])[:3])
            metrics.setdefault(policy, json.loads((output / "metrics.json").read_text()))
            shutil.rmtree(output)
            *measured, output_rows = run([sys.executable, "-c", DUCKDB_PROCESS, query(pattern, policy)],
                                         stdout=subprocess.PIPE)
            times[policy][1].append(tuple(measured))
            rows.setdefault(policy, json.loads(output_rows))
            load.append(os.getloadavg())
    cores = os.cpu_count()
    entries = {}
    for policy in policies:
        calls = metrics[policy]["totals"]["calls"]["input"]
        ours_s, duck_s = (summary(samples, calls, cores) for samples in times[policy])
        compared, found = differences(metrics[policy], rows[policy])
        entries[policy or "none"] = {
            "tool_calls": calls, "trajectories": metrics[policy]["totals"]["trajectories"]["input"],
            "shards": metrics[policy]["inputs"]["files"], "litmus_score": ours_s, "duckdb": duck_s,
            "ratio": round(ours_s["seconds"] / duck_s["seconds"], 2),
            "cpu_ratio": round(ours_s["cpu_seconds"] / duck_s["cpu_seconds"], 2),
            "unscored_by_reason": {reason: count for reason, count in
                                   metrics[policy]["totals"]["trajectories"]["unscored_by_reason"].items() if count},
            "check": {"fields": compared, "differences": len(found)}}
        if found:
            print(f"check FAILED ({calls:,} calls, {policy or 'no policy'}): {len(found)} of {compared} fields "
                  "differ", file=sys.stderr)
            for difference in found[:50]:
                print("  ", *difference, file=sys.stderr)
        else:
            print(f"check ({calls:,} calls, {policy or 'no policy'}): DuckDB and metrics.json agree on all "
                  f"{compared} fields ({len(rows[policy])} groups and the totals)", file=sys.stderr)
    return entries


def policy_cost(entries: dict) -> dict:
    """What the policy costs, from a scale's runs with and without it."""
    (with_policy,), without = [entry for name, entry in entries.items() if name != "none"], entries["none"]
    return {"wall_ratio": {name: round(with_policy[name]["seconds"] / without[name]["seconds"], 3)
                           for name in ("litmus_score", "duckdb")},
            # Per call and context: both contexts of every call are put to the policy.
            "cpu_us_per_call_and_context": round(
                (with_policy["litmus_score"]["cpu_seconds"] - without["litmus_score"]["cpu_seconds"])
                / (2 * with_policy["tool_calls"]) * 1e6, 2)}


def startup(repeat: int, demo: str, beam_args: list, workdir: Path, load: list) -> dict:
    """`litmus-score --help`, and scoring the demo's shards as `litmus-score
    demo` does (no policy), `repeat` times in turn. No query beside them: the
    demo holds texts DuckDB's json_valid reads otherwise (NaN, a trailing comma)."""
    samples = {"help": [], "demo": []}
    output = workdir / "out-demo"
    for _ in range(repeat):
        samples["help"].append(run([sys.executable, "-m", "pipeline", "--help"])[:3])
        shutil.rmtree(output, ignore_errors=True)
        samples["demo"].append(run([sys.executable, "-m", "pipeline", "score", "--input", demo,
                                    "--output", str(output), *beam_args])[:3])
        load.append(os.getloadavg())
    trajectories = json.loads((output / "metrics.json").read_text())["totals"]["trajectories"]["input"]
    shutil.rmtree(output)
    report = {}
    for name, runs in samples.items():
        wall, rss, cpu = (statistics.median(column) for column in zip(*runs))
        report[name] = {"seconds": round(wall, 2), "cpu_seconds": round(cpu, 2), "peak_rss_mib": round(rss),
                        "all_seconds": [round(sample[0], 2) for sample in runs]}
    report["demo"]["trajectories"] = trajectories
    return report


def targets(report: dict) -> list:
    """Issue 37's targets as (target, measured, met), for what this round measured."""
    rows = []
    if "startup" in report:
        demo, helped = report["startup"]["demo"], report["startup"]["help"]
        rows += [("score the demo's 1,200 trajectories, whole process, at most 2 s", f"{demo['seconds']:.2f} s",
                  demo["seconds"] <= STARTUP_S),
                 ("`litmus-score --help` at most 0.5 s", f"{helped['seconds']:.2f} s", helped["seconds"] <= HELP_S)]
    for scale in report["scales"]:
        if scale["calls"] < 10_000_000:
            continue
        for name, entry in scale["by_policy"].items():
            rss, ratio, policy = entry["litmus_score"]["peak_rss_mib"], entry["ratio"], name != "none"
            calls = f"{entry['tool_calls']:,} calls {'with' if policy else 'without'} the policy"
            rows.append((f"{calls}: peak RSS at most 600 MB", f"{rss} MiB ({rss / MB:.0f} MB)", rss <= RSS_MIB_AT_10M))
            rows.append((f"{calls}: ahead of the query" if policy else f"{calls}: at most 0.8x the query",
                         f"{ratio:.2f}x", ratio < 1 if policy else ratio <= NO_POLICY_RATIO_AT_10M))
    return rows


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ours, beam_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", default="1000000",
                        help="tool calls in the workload, about; several scales separated by commas")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None,
                        help="keep the workloads here and reuse them (default: a temp folder)")
    parser.add_argument("--workload", choices=("varied", "imported"), default="varied")
    parser.add_argument("--policy", default=str(POLICY),
                        help="policy file for litmus-score (default configs/policy.yaml, which benchmarks/policy.sql "
                             "states in SQL), or `none`")
    parser.add_argument("--without-policy-too", action="store_true",
                        help="also time both without a policy, in the same alternation")
    parser.add_argument("--startup", action="store_true",
                        help="also time `litmus-score --help` and scoring the demo's 1,200 trajectories")
    args = parser.parse_args(ours)
    scales = [int(calls) for calls in args.calls.split(",") if calls]
    policies = [] if args.policy == "none" else [args.policy]
    if args.without_policy_too or not policies:
        policies.append(None)
    if any(policy not in (None, str(POLICY)) for policy in policies):
        print("note: benchmarks/policy.sql states configs/policy.yaml; the check fails for another policy",
              file=sys.stderr)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="litmus-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    patterns = {calls: prepare(workdir, calls, args.seed, args.workload) for calls in scales}
    load = [os.getloadavg()]
    report = {"workload": args.workload, "cores": os.cpu_count(), "beam_args": beam_args, "runs": args.repeat,
              "scales": []}
    if args.startup:
        demo = prepare(workdir, 0, args.seed, "demo")
        report["startup"] = startup(args.repeat, demo, beam_args, workdir, load)
    for calls in scales:
        entries = bench(patterns[calls], policies, args.repeat, beam_args, workdir, load)
        report["scales"].append({"calls": calls, "by_policy": entries,
                                 **({"policy_cost": policy_cost(entries)} if len(policies) == 2 else {})})
    report["load_average_1min"] = [round(sample[0], 2) for sample in load]
    report["targets"] = [{"target": target, "measured": measured, "met": met}
                         for target, measured, met in targets(report)]
    print(json.dumps(report, indent=2))

    print("\n| tool calls | workload | policy | litmus-score | CPU-s | peak RSS | DuckDB query | CPU-s | peak RSS "
          "| ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    measured = [(name, entry) for scale in report["scales"] for name, entry in scale["by_policy"].items()]
    for name, entry in measured:
        ours_s, duck_s = entry["litmus_score"], entry["duckdb"]
        print(f"| {entry['tool_calls']:,} | {args.workload} | {'none' if name == 'none' else 'policy'} "
              f"| {ours_s['seconds']:.2f} s | {ours_s['cpu_seconds']:.1f} | {ours_s['peak_rss_mib']} MiB "
              f"| {duck_s['seconds']:.2f} s | {duck_s['cpu_seconds']:.1f} | {duck_s['peak_rss_mib']} MiB "
              f"| **{entry['ratio']:.2f}x** |")
    if args.startup:
        helped, demo = report["startup"]["help"], report["startup"]["demo"]
        print(f"\nStart-up: `litmus-score --help` {helped['seconds']:.2f} s ({helped['cpu_seconds']:.2f} CPU-s); "
              f"`litmus-score score` of the demo's {demo['trajectories']:,} trajectories {demo['seconds']:.2f} s "
              f"({demo['cpu_seconds']:.2f} CPU-s, peak RSS {demo['peak_rss_mib']} MiB)")
    if report["targets"]:
        print("\n| target (issue 37) | measured | |\n|---|---|---|")
        for row in report["targets"]:
            print(f"| {row['target']} | {row['measured']} | {'met' if row['met'] else '**not met**'} |")
    print(f"\n1-minute load average: {min(report['load_average_1min']):.1f} to "
          f"{max(report['load_average_1min']):.1f}")
    if any(entry["check"]["differences"] for _, entry in measured):
        sys.exit(1)
    if not args.workdir:
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
