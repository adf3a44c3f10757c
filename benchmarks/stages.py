"""CPU time per stage: each stage's DoFn called directly on a shard's batches, without Beam.

Shows where a call's cost goes (docs/performance.md, "Where the time goes"); the
whole pipeline adds Beam's bookkeeping, start-up and finishing the run.

    python benchmarks/stages.py SHARD.parquet [...] [--batch_rows 4096] [--adjudication commit] [--policy FILE]
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time

import apache_beam as beam

from litmus_score.scoring.policy import load_policy
from transforms.classify import ClassifyFn
from transforms.completeness import CheckCompletenessFn
from transforms.duplicates import HashKeysFn
from transforms.elements import Checked, Resolved, Shard
from transforms.read import DEFAULT_BATCH_ROWS, ReadShardFn, calls_in
from transforms.resolve import ResolveContextsFn
from transforms.write import SCORED_FILES, TRAJECTORY_FILES, WriteBundleFn

CPU = collections.Counter()


def timed(stage: str, outputs) -> list:
    """Every output of a DoFn call, its CPU time counted under `stage`."""
    start = time.process_time()
    result = list(outputs)
    CPU[stage] += time.process_time() - start
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shards", nargs="+")
    parser.add_argument("--batch_rows", type=int, default=DEFAULT_BATCH_ROWS)
    parser.add_argument("--adjudication", default="commit")
    parser.add_argument("--policy", default=None, help="a policy file, as `score --policy`")
    args = parser.parse_args(argv)
    policy = load_policy(args.policy) if args.policy else None
    read, complete = ReadShardFn(args.batch_rows), CheckCompletenessFn()
    resolve, classify = ResolveContextsFn(args.adjudication, policy), ClassifyFn(args.adjudication)
    calls = 0
    with tempfile.TemporaryDirectory() as folder:
        for path in args.shards:
            timed("duplicate-key index", HashKeysFn().process(Shard(path)))
            for batch in timed("read", read.process(Shard(path))):
                if isinstance(batch, beam.pvalue.TaggedOutput):
                    continue
                calls += calls_in(batch)
                for checked in timed("completeness", complete.process(batch)):
                    if not isinstance(checked, Checked):
                        continue
                    for resolved in timed("context resolution", resolve.process(checked)):
                        if not isinstance(resolved, Resolved):
                            continue
                        outputs = timed("classification", classify.process(resolved))
                        tables = {SCORED_FILES: [o for o in outputs if not isinstance(o, beam.pvalue.TaggedOutput)],
                                  TRAJECTORY_FILES: [o.value for o in outputs if isinstance(o, beam.pvalue.TaggedOutput)
                                                     and o.tag == "trajectories"]}
                        for files, written in tables.items():
                            writer = WriteBundleFn(files, folder)
                            writer.start_bundle()
                            timed(f"writing {files.folder}/", (writer.process(table) for table in written))
                            timed(f"writing {files.folder}/", writer.finish_bundle())
    total = sum(CPU.values())
    print(f"{calls:,} calls, {total:.2f} CPU-s: {total / calls * 1e6:.2f} CPU-s per million calls")
    for stage, seconds in CPU.most_common():
        print(f"  {stage:22s} {seconds / calls * 1e6:5.2f} s per M calls  {100 * seconds / total:4.1f}%")


if __name__ == "__main__":
    main()
