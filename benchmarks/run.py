"""Throughput benchmark: litmus-score against a DuckDB query over the same shards.

Generates a synthetic workload (at least --calls tool calls), then times, as
whole processes and --repeat times each (medians reported):
  * `litmus-score score` writing all its outputs, with the Beam options given
    after `--` (default: DirectRunner's defaults);
  * one DuckDB SQL query computing the per-(run_id, agent) counts of
    trajectories, calls and commit-table categories from the same shards.
Prints both wall times, their ratio and the scorer's peak memory (the largest
resident set of any process it started).

    python benchmarks/run.py --calls 1000000 [--repeat 3] [-- --direct_num_workers=2 ...]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from testing import synthetic

# Mean calls per synthetic trajectory, with margin, to size the workload.
CALLS_PER_TRAJECTORY = 6.2
# Shards grow with the workload, so a bigger input means more files of the
# same size (as in a real sweep), not bigger row groups.
CALLS_PER_SHARD = 130_000

DUCKDB_QUERY = """
SELECT run_id, agent,
       count(DISTINCT trajectory_id) AS trajectories,
       count(call) AS calls,
       count(*) FILTER (WHERE realized AND p = 'deny' AND c = 'deny') AS misuse,
       count(*) FILTER (WHERE realized AND p = 'allow' AND c = 'deny') AS escalated_misuse,
       count(*) FILTER (WHERE realized AND p = 'deny' AND c = 'allow') AS deescalated,
       count(*) FILTER (WHERE NOT realized AND (p = 'deny' OR c = 'deny')) AS blocked_attempt,
       count(*) FILTER (WHERE p = 'allow' AND c = 'allow') AS benign
FROM (
  SELECT run_id, agent, trajectory_id, call,
         call.proposal.policy_verdict AS p, call.commit.policy_verdict AS c,
         coalesce(call.commit.outcome = 'committed', false)
           OR coalesce(call.commit.state_mutated, false) AS realized
  FROM (SELECT run_id, agent, trajectory_id, unnest(calls) AS call FROM read_parquet('{shards}'))
)
GROUP BY run_id, agent ORDER BY run_id, agent
"""


def timed(command):
    """Wall seconds of a whole process, from start to exit."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def peak_rss_mib() -> float:
    """Largest resident set of any child process waited for so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ours, beam_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000, help="minimum tool calls in the workload")
    parser.add_argument("--shards", type=int, default=None,
                        help=f"number of shards (default: one per {CALLS_PER_SHARD:,} calls)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="keep the workload here (default: a temp folder)")
    args = parser.parse_args(ours)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="litmus-bench-"))
    count = args.shards or math.ceil(args.calls / CALLS_PER_SHARD)
    shards = workdir / f"shards-{args.calls}-{count}"
    if not shards.exists():
        synthetic.generate(str(shards), math.ceil(args.calls / CALLS_PER_TRAJECTORY), count, 1)
    pattern = str(shards / "*.parquet")

    query = DUCKDB_QUERY.format(shards=pattern.replace("'", "''"))
    calls = duckdb.sql(f"SELECT sum(len(calls)) FROM read_parquet('{pattern}')").fetchall()[0][0]

    # The scorer runs first, so the peak RSS seen by then is its own.
    scorer = []
    for i in range(args.repeat):
        output = workdir / f"out-{i}"
        shutil.rmtree(output, ignore_errors=True)  # left by an interrupted run
        scorer.append(timed([sys.executable, "-m", "pipeline", "score", "--input", pattern,
                             "--output", str(output), *beam_args]))
        shutil.rmtree(output)
    peak = peak_rss_mib()
    query_times = [timed([sys.executable, "-c", "import duckdb, sys; duckdb.sql(sys.argv[1]).fetchall()", query])
                   for _ in range(args.repeat)]

    ours_s, duck_s = statistics.median(scorer), statistics.median(query_times)
    print(json.dumps({
        "tool_calls": int(calls),
        "shards": count,
        "beam_args": beam_args,
        "litmus_score_seconds": round(ours_s, 2),
        "duckdb_seconds": round(duck_s, 2),
        "ratio": round(ours_s / duck_s, 2),
        "litmus_score_peak_rss_mib": round(peak),
        "runs": args.repeat,
    }, indent=2))
    if not args.workdir:
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
