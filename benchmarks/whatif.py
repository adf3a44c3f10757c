"""What several policies cost in one what-if, against one scoring run.

Generates the `imported` workload of benchmarks/workload.py (no recorded
verdicts: the policy gives every verdict, so every policy has work to do;
kept in --workdir and reused), writes three candidates derived from
configs/policy.yaml (a rule dropped, a rule added, a limit changed), then
times as whole processes, --repeat times each, in turn:
  * `litmus-score score --policy configs/policy.yaml` (one policy, all of a run's outputs);
  * `litmus-score whatif` with the base and one candidate (2 policies);
  * `litmus-score whatif` with the base and the three candidates (4 policies);
and prints the medians, each what-if's ratio to the one run, and a Markdown row each.

    python benchmarks/whatif.py --calls 1000000 [--repeat 3] [--workdir DIR] [-- --direct_num_workers=1 ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import workload
import yaml
from run import POLICY, run


def candidates(folder: Path) -> list:
    """Three variations of the base policy, as files in `folder`."""
    base = yaml.safe_load(POLICY.read_text())
    rules = base["rules"]
    variations = {
        "without-path-traversal": [rule for rule in rules if rule["id"] != "path-traversal"],
        "no-deletes": [*rules, {"id": "no-deletes", "tool": "delete_records", "effect": "deny"}],
        "lower-transfer-limit": [{**rule, "when": [{"arg": "amount", "gt": 1000}]}
                                 if rule["id"] == "transfer-over-limit" else rule for rule in rules],
    }
    paths = []
    for name, changed in variations.items():
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**base, "rules": changed}, sort_keys=False))
        paths.append(path)
    return paths


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ours, beam_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000, help="tool calls in the workload, about")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="keep the workload here and reuse it (default: a temp folder)")
    args = parser.parse_args(ours)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="litmus-whatif-bench-"))
    shards = workdir / f"imported-{args.calls}-seed{args.seed}"
    if not (shards / "_COMPLETE").exists():
        shutil.rmtree(shards, ignore_errors=True)  # left by an interrupted generation
        start = time.perf_counter()
        workload.generate(str(shards), args.calls, args.seed, imported=True)
        (shards / "_COMPLETE").touch()
        print(f"generated {shards} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    pattern = str(shards / "*.parquet")
    extra = candidates(workdir)
    output = workdir / "out"
    commands = {
        "score, 1 policy": ["score", "--policy", str(POLICY)],
        "whatif, 2 policies": ["whatif", "--policy", str(POLICY), "--candidate", str(extra[0])],
        "whatif, 4 policies": ["whatif", "--policy", str(POLICY), *(a for path in extra for a in ("--candidate",
                                                                                                 str(path)))],
    }
    times: dict = {name: [] for name in commands}
    calls = None
    for _ in range(args.repeat):
        for name, command in commands.items():
            shutil.rmtree(output, ignore_errors=True)  # left by an interrupted run
            print(f"{name}...", file=sys.stderr)
            times[name].append(run([sys.executable, "-m", "pipeline", *command, "--input", pattern,
                                    "--output", str(output), *beam_args])[:3])
            if calls is None:
                calls = json.loads((output / "metrics.json").read_text())["totals"]["calls"]["input"]
            shutil.rmtree(output)

    medians = {name: [statistics.median(column) for column in zip(*samples)] for name, samples in times.items()}
    one_run = medians["score, 1 policy"]
    report = {"tool_calls": calls, "runs": args.repeat, "beam_args": beam_args,
              "by_command": {name: {"seconds": round(wall, 2), "peak_rss_mib": round(rss), "cpu_seconds": round(cpu, 2),
                                    "seconds_vs_one_run": round(wall / one_run[0], 2),
                                    "all_seconds": [round(sample[0], 2) for sample in times[name]]}
                             for name, (wall, rss, cpu) in medians.items()}}
    print(json.dumps(report, indent=2))
    print("\n| command | seconds | CPU seconds | peak RSS MiB | vs one run |\n|---|---|---|---|---|")
    for name, row in report["by_command"].items():
        print(f"| {name} | {row['seconds']} | {row['cpu_seconds']} | {row['peak_rss_mib']} | "
              f"{row['seconds_vs_one_run']}x |")


if __name__ == "__main__":
    main()
