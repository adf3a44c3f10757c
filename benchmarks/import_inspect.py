"""Rate, memory and outputs of `litmus-score import inspect` as a log grows.

Inspect writes a small genuine log (mockllm, scripted, offline: --base
samples, each of five tool calls with arguments long enough to be kept as
attachments). Logs of each --scales multiple of it are then built by copying
its sample members under new ids into a new zip, as Inspect names and
compresses them, with the header's sample ids to match (Inspect's own
write_eval_log would hold every sample in memory). For each log the
benchmark prints:

- the reader's rate on one core: `read_log` consumed in-process, samples/s;
- the whole `litmus-score import` process (FnApiRunner): wall time,
  samples/s and peak resident memory;
- that the import's manifest, shards and unmapped rows reconcile, and that
  every imported sample's row equals the small log's row of the sample it
  was copied from (all but its ids and position).

With --dask_workers 1,2 each log is also imported on a local Dask cluster
of one worker, then of two (`--runner dask --dask_local_workers N`).

    python benchmarks/import_inspect.py [--base 1000] [--scales 1,10,100] [--dask_workers 1,2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import orjson
import pyarrow.parquet as pq
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.log import read_eval_log, write_eval_log
from inspect_ai.model import ChatMessageAssistant, ModelOutput, ModelUsage, get_model
from inspect_ai.model._model_output import ChatCompletionChoice
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolCall, tool
from inspect_ai.util import store

from litmus_score.importers.inspect import read_log

CALLS_PER_SAMPLE = 5
USAGE = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)


@tool
def update_config():
    async def execute(key: str, value: str) -> str:
        """Set a configuration key.

        Args:
            key: the key
            value: its value
        """
        store().set(key, value)
        return "ok"

    return execute


def _output(calls) -> ModelOutput:
    if calls:
        message = ChatMessageAssistant(content="", tool_calls=calls)
        choice = ChatCompletionChoice(message=message, stop_reason="tool_calls")
        output = ModelOutput(model="mockllm/model", choices=[choice])
    else:
        output = ModelOutput.from_content("mockllm/model", "done")
    output.usage = USAGE
    return output


def seed_log(folder: Path) -> Path:
    outputs = [_output([ToolCall(id=f"c{i}", function="update_config", arguments={"key": f"k{i}", "value": "v" * 200})])
               for i in range(CALLS_PER_SAMPLE)] + [_output([])]
    task = Task(name="bench", dataset=[Sample(id="seed", input="x")], solver=[use_tools([update_config()]), generate()])
    [log] = eval(task, model=get_model("mockllm/model", custom_outputs=outputs), log_dir=str(folder), display="none")
    return Path(log.location)


def small_log(seed: Path, samples: int, path: Path) -> Path:
    """The seed's one sample copied `samples` times by Inspect's own log API."""
    log = read_eval_log(str(seed))
    [sample] = log.samples
    log.samples = [sample.model_copy(update={"id": f"s{i}"}) for i in range(samples)]
    log.eval.dataset.sample_ids = [f"s{i}" for i in range(samples)]
    log.eval.dataset.samples = samples
    write_eval_log(log, str(path))
    return path


def _copy_id(sample_id: str, copy: int) -> str:
    return sample_id if copy == 0 else f"{sample_id}-copy{copy}"


def scaled_log(small: Path, scale: int, path: Path) -> Path:
    """`small`'s samples `scale` times over, copy k of sample S named S-copyk
    (copy 0 keeps its id), one member at a time."""
    with zipfile.ZipFile(small) as source, zipfile.ZipFile(path, "w") as target:
        header = orjson.loads(source.read("header.json"))
        ids = header["eval"]["dataset"]["sample_ids"]
        members = [info for info in source.infolist() if info.filename.startswith("samples/")]
        for copy in range(scale):
            for info in members:
                record = orjson.loads(source.read(info))
                record["id"] = _copy_id(record["id"], copy)
                name = f"samples/{record['id']}_epoch_{record['epoch']}.json"
                target.writestr(zipfile.ZipInfo(name, info.date_time), orjson.dumps(record),
                                compress_type=info.compress_type)
        header["eval"]["dataset"]["sample_ids"] = [_copy_id(i, copy) for copy in range(scale) for i in ids]
        header["eval"]["dataset"]["samples"] = len(ids) * scale
        header.pop("results", None)  # the small log's scores summarize its own samples
        for info in source.infolist():
            if info.filename == "header.json":
                target.writestr(info, orjson.dumps(header), compress_type=info.compress_type)
    return path


def reader_rate(log: Path) -> float:
    """Samples per second of the importer's reader alone, consumed in this process (one core)."""
    start = time.process_time()
    samples = sum(1 for item in read_log(str(log), str(log), "agent") if hasattr(item, "row"))
    return samples / (time.process_time() - start)


def _high_water_mib(pid: int) -> float:
    """The process's peak resident set so far (VmHWM; Linux)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024
    except (OSError, StopIteration):
        return 0.0


def _tree(pid: int) -> list:
    """The process and its descendants (a Dask cluster's workers), from /proc."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                pending += [int(child) for child in task.read_text().split()]
            except OSError:
                pass
    return found


def import_once(log: Path, output: Path, log_format: str = "inspect", *beam_flags: str) -> tuple:
    """(wall seconds, the largest peak RSS in MiB of the import's processes) of one import
    (FnApiRunner unless `beam_flags` say otherwise).

    The peak is polled from /proc rather than taken from wait4's ru_maxrss,
    which also counts the pages the child shared with this (large) process
    between fork and exec.
    """
    command = [sys.executable, "-m", "pipeline", "import", log_format, str(log), "--output", str(output),
               *(beam_flags or ("--runner", "FnApiRunner"))]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    peak = 0.0
    while process.poll() is None:
        peak = max([peak, *(_high_water_mib(pid) for pid in _tree(process.pid))])
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"import failed: {' '.join(command)}")
    return elapsed, peak


def check_accounting(output: Path, samples: int) -> None:
    manifest = json.loads((output / "import-manifest.json").read_text())
    rows = sum(pq.read_metadata(p).num_rows for p in (output / "trajectories").glob("*.parquet"))
    unmapped = sum(pq.read_metadata(p).num_rows for p in (output / "unmapped").glob("*.parquet"))
    calls = sum(sum(pq.read_table(p, columns=["call_count"]).column(0).to_pylist())
                for p in (output / "trajectories").glob("*.parquet"))
    totals = manifest["totals"]
    assert totals["units"] == totals["trajectories"] == rows == samples, (totals, rows)
    assert totals["calls"] == calls == samples * CALLS_PER_SAMPLE, (totals, calls)
    assert totals["unmapped"] == unmapped == 0, (totals, unmapped)


def _rows_by_origin(output: Path) -> dict:
    """sample id -> its trajectory row, ids and position left out; the id a copy came from."""
    rows = {}
    for path in (output / "trajectories").glob("*.parquet"):
        for row in pq.read_table(path).to_pylist():
            sample_id = row.pop("task_id")
            for key in ("trajectory_id", "source_log", "source_position"):
                row.pop(key)
            rows[sample_id] = row
    return rows


def check_outputs(small_rows: dict, output: Path, scale: int) -> None:
    """Every copy's row equals its original's in the small log."""
    rows = _rows_by_origin(output)
    assert len(rows) == len(small_rows) * scale, (len(rows), len(small_rows), scale)
    for sample_id, row in rows.items():
        assert row == small_rows[sample_id.split("-copy")[0]], sample_id


def _runs(dask_workers: str) -> list:
    """(label, Beam flags) of each import to time: FnApiRunner, then Dask with each number of workers."""
    runs = [("FnApiRunner", ("--runner", "FnApiRunner"))]
    for workers in filter(None, dask_workers.split(",")):
        runs.append((f"dask x{workers}", ("--runner", "dask", "--dask_local_workers", workers)))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=1000, help="samples of the small log")
    parser.add_argument("--scales", default="1,10,100", help="comma-separated multiples of the small log")
    parser.add_argument("--dask_workers", default="", help="also import each log on a local Dask cluster of "
                                                             "these numbers of workers, in turn (e.g. 1,2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="litmus-import-bench-") as work:
        work = Path(work)
        small = small_log(seed_log(work / "seed"), args.base, work / "small.eval")
        import_once(small, work / "out-small")
        small_rows = _rows_by_origin(work / "out-small")
        print(f"{'samples':>8} {'log MiB':>8} {'reader/s':>9} {'runner':>12} {'import s':>9} {'import/s':>9} "
              f"{'peak RSS MiB':>13}  outputs")
        for scale in (int(n) for n in args.scales.split(",")):
            samples = args.base * scale
            log = scaled_log(small, scale, work / f"log-{samples}.eval")
            rate = reader_rate(log)
            for label, flags in _runs(args.dask_workers):
                output = work / f"out-{samples}-{label.replace(' ', '')}"
                elapsed, peak = import_once(log, output, "inspect", *flags)
                check_accounting(output, samples)
                check_outputs(small_rows, output, scale)
                print(f"{samples:>8} {log.stat().st_size / 2**20:>8.1f} {rate:>9.0f} {label:>12} {elapsed:>9.1f} "
                      f"{samples / elapsed:>9.0f} {peak:>13.0f}  reconcile, equal the small log's", flush=True)
                shutil.rmtree(output)
            log.unlink()


if __name__ == "__main__":
    main()
