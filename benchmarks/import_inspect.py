"""Memory and accounting of `litmus-score import inspect` as a log grows.

Inspect writes a log of one sample with tool calls (mockllm, scripted,
offline); Inspect's own log API then copies that sample into logs of each
--samples size. Each log is imported by a separate `litmus-score import`
process; the benchmark prints its wall time and peak resident memory, and
checks that the manifest, the shards and the unmapped rows reconcile.
Memory should stay flat: the importer streams one sample at a time.

    python benchmarks/import_inspect.py [--samples 100,1000,3000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.log import read_eval_log, write_eval_log
from inspect_ai.model import ChatMessageAssistant, ModelOutput, ModelUsage, get_model
from inspect_ai.model._model_output import ChatCompletionChoice
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolCall, tool
from inspect_ai.util import store

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


def grown_log(seed: Path, samples: int, path: Path) -> Path:
    log = read_eval_log(str(seed))
    [sample] = log.samples
    log.samples = [sample.model_copy(update={"id": f"s{i}"}) for i in range(samples)]
    log.eval.dataset.sample_ids = [f"s{i}" for i in range(samples)]
    log.eval.dataset.samples = samples
    write_eval_log(log, str(path))
    return path


def _high_water_mib(pid: int) -> float:
    """The process's peak resident set so far (VmHWM; Linux)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024
    except (OSError, StopIteration):
        return 0.0


def import_once(log: Path, output: Path) -> tuple:
    """(wall seconds, peak RSS in MiB) of one import process.

    The peak is polled from /proc rather than taken from wait4's ru_maxrss,
    which also counts the pages the child shared with this (large) process
    between fork and exec.
    """
    command = [sys.executable, "-m", "pipeline", "import", "inspect", str(log), "--output", str(output),
               "--runner", "FnApiRunner"]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    peak = 0.0
    while process.poll() is None:
        peak = max(peak, _high_water_mib(process.pid))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", default="100,1000,3000", help="comma-separated log sizes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="litmus-import-bench-") as work:
        work = Path(work)
        seed = seed_log(work / "seed")
        print(f"{'samples':>8} {'log MiB':>8} {'wall s':>7} {'peak RSS MiB':>13}  accounting")
        for samples in (int(n) for n in args.samples.split(",")):
            log = grown_log(seed, samples, work / f"log-{samples}.eval")
            elapsed, peak = import_once(log, work / f"out-{samples}")
            check_accounting(work / f"out-{samples}", samples)
            print(f"{samples:>8} {log.stat().st_size / 2**20:>8.1f} {elapsed:>7.1f} {peak:>13.0f}  reconciles")


if __name__ == "__main__":
    main()
