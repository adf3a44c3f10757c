"""CPU time per stage: each stage's DoFn called directly on a shard's batches, without Beam.

Shows where a call's cost goes (docs/performance.md); the whole pipeline adds
Beam's bookkeeping, start-up and finishing the run. With --threads N it then
scores the same shards again, one shard at a time in each of N threads, and
gives the wall and CPU time of both ways: how far the stages themselves let
worker threads run side by side (what the GIL leaves), Beam apart.

    python benchmarks/stages.py SHARD.parquet [...] [--batch_rows 3072] [--adjudication commit] [--policy FILE]
        [--threads 2]
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import threading
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


def score_shard(path: str, stages: tuple, folder: str, timed=timed) -> int:
    """Every stage on one shard, its outputs written under `folder`; the calls read."""
    read, complete, resolve, classify = stages
    calls = 0
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
                    timed(f"writing {files.folder}/", (out for table in written for out in writer.process(table)))
                    timed(f"writing {files.folder}/", writer.finish_bundle())
    return calls


def compare_threads(shards: list, new_stages, folder: str, threads: int) -> None:
    """Wall and CPU time of scoring `shards` in one thread, then dealt out to `threads` threads,
    each with its own DoFns (`new_stages()`), as each Beam worker has."""
    untimed = lambda stage, outputs: list(outputs)  # noqa: E731
    by_thread = [shards[i::threads] for i in range(threads)]

    def each(paths):
        stages = new_stages()
        for path in paths:
            score_shard(path, stages, folder, untimed)

    for label, run in (("one thread", lambda: each(shards)),
                       (f"{threads} threads", lambda: _in_threads(each, by_thread))):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"  {label:11s} {wall:6.2f} s wall, {cpu:6.2f} CPU-s ({cpu / wall:.2f} cores busy)")


def _in_threads(work, parts: list) -> None:
    workers = [threading.Thread(target=work, args=(part,)) for part in parts]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shards", nargs="+")
    parser.add_argument("--batch_rows", type=int, default=DEFAULT_BATCH_ROWS)
    parser.add_argument("--adjudication", default="commit")
    parser.add_argument("--policy", default=None, help="a policy file, as `score --policy`")
    parser.add_argument("--threads", type=int, default=1,
                        help="then score the shards again in this many threads, against one")
    args = parser.parse_args(argv)
    policy = load_policy(args.policy) if args.policy else None
    def new_stages() -> tuple:
        return (ReadShardFn(args.batch_rows), CheckCompletenessFn(), ResolveContextsFn(args.adjudication, policy),
                ClassifyFn(args.adjudication))

    with tempfile.TemporaryDirectory() as folder:
        stages = new_stages()
        calls = sum(score_shard(path, stages, folder) for path in args.shards)
        total = sum(CPU.values())
        print(f"{calls:,} calls, {total:.2f} CPU-s: {total / calls * 1e6:.2f} CPU-s per million calls")
        for stage, seconds in CPU.most_common():
            print(f"  {stage:22s} {seconds / calls * 1e6:5.2f} s per M calls  {100 * seconds / total:4.1f}%")
        if args.threads > 1:
            compare_threads(args.shards, new_stages, folder, args.threads)


if __name__ == "__main__":
    main()
