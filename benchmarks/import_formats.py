"""Rate, memory and outputs of `litmus-score import` for Inspect .json logs,
AgentDojo folders and OTLP files as they grow.

For each format a small log is written by the format's own tools (offline,
scripted: the builders of tests/), and logs of each --scales multiple of it
are built by copying its units under new ids: Inspect samples in the one
JSON document, AgentDojo episode files under new user task ids, OTLP lines
under new trace ids. For each log the benchmark prints:

- the reader's rate on one core: the format's `read_log` consumed
  in-process over every file, units (samples, episodes, spans) per CPU second;
- the whole `litmus-score import` process (FnApiRunner): wall time, units/s
  and peak resident memory;
- that the manifest, shards and unmapped rows reconcile, and that every
  row equals the small log's row of the unit it was copied from (all but
  its ids and position).

    python benchmarks/import_formats.py [--formats inspect-json,agentdojo,otel] [--scales 10,100]

`.eval` logs are import_inspect.py's.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq
from import_inspect import import_once, seed_log, small_log

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' log builders


def _copy_id(unit_id: str, copy: int) -> str:
    return unit_id if copy == 0 else f"{unit_id}-copy{copy}"


def _origin(unit_id: str) -> str:
    return unit_id.split("-copy")[0]


class InspectJson:
    """An Inspect log written as one JSON document (`--base` samples of five tool calls)."""

    name, log_format, units = "inspect-json", "inspect", "samples"
    # Fields that name a copy rather than say what it holds.
    ids = ("trajectory_id", "source_log", "source_position")

    def __init__(self, base: int):
        self.base = base

    def small(self, work: Path) -> Path:
        from inspect_ai.log import read_eval_log, write_eval_log

        path = work / "small.json"
        log = read_eval_log(str(small_log(seed_log(work / "seed"), self.base, work / "small.eval")))
        write_eval_log(log, str(path), format="json")
        return path

    def scaled(self, small: Path, scale: int, path: Path) -> Path:
        document = orjson.loads(small.read_bytes())
        samples = document["samples"]
        ids = document["eval"]["dataset"]["sample_ids"]
        document["samples"] = [{**sample, "id": _copy_id(sample["id"], copy)}
                               for copy in range(scale) for sample in samples]
        document["eval"]["dataset"]["sample_ids"] = [_copy_id(i, copy) for copy in range(scale) for i in ids]
        document["eval"]["dataset"]["samples"] = len(ids) * scale
        document.pop("results", None)
        path = path.with_suffix(".json")
        path.write_bytes(orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY))
        return path

    def key(self, row: dict) -> str:
        return _origin(row.pop("task_id"))

    def count(self, report: dict) -> int:
        return report["units"]


class AgentDojo:
    """AgentDojo's own benchmark output: 4 episodes (two user tasks, the environment
    allowing and refusing the injection), copied to `--base` episodes."""

    name, log_format, units = "agentdojo", "agentdojo", "episodes"
    ids = ("trajectory_id", "task_id", "user_task_id", "source_log", "source_position")

    def __init__(self, base: int):
        self.base = base

    def small(self, work: Path) -> Path:
        from tests import agentdojo_logs

        seed = work / "seed-agentdojo"
        agentdojo_logs.write_logs(seed, refuse=False)
        agentdojo_logs.write_logs(seed, refuse=True)
        episodes = sorted(seed.rglob("*.json"))
        return self._copies(seed, episodes, self.base // len(episodes), work / "small-agentdojo")

    @staticmethod
    def _copies(root: Path, episodes, copies: int, folder: Path) -> Path:
        for path in episodes:
            document = orjson.loads(path.read_bytes())
            relative = path.relative_to(root).parts  # pipeline/suite/user_task/attack/injection_task.json
            for copy in range(copies):
                user_task = _copy_id(document["user_task_id"], copy)
                target = folder.joinpath(relative[0], relative[1], user_task, *relative[3:])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(orjson.dumps({**document, "user_task_id": user_task}))
        return folder

    def scaled(self, small: Path, scale: int, path: Path) -> Path:
        folder = path.with_suffix("")
        for episode in sorted(small.rglob("*.json")):
            document = orjson.loads(episode.read_bytes())
            relative = episode.relative_to(small).parts
            for copy in range(scale):
                user_task = f"{document['user_task_id']}-x{copy}"
                target = folder.joinpath(relative[0], relative[1], user_task, *relative[3:])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(orjson.dumps({**document, "user_task_id": user_task}))
        return folder

    def key(self, row: dict) -> tuple:
        return row["run_id"], row.pop("user_task_id").split("-x")[0], row.pop("trajectory_id").split("/")[-1]

    def count(self, report: dict) -> int:
        return report["units"]


class Otel:
    """OTLP/JSON lines of pydantic-ai's own instrumentation (two conversations of a
    scripted agent), copied under new conversation and trace ids to `--base`
    conversations in one file."""

    name, log_format, units = "otel", "otel", "spans"
    ids = ("trajectory_id", "otel_trace_ids", "source_log", "source_position")

    def __init__(self, base: int):
        self.base = base

    def small(self, work: Path) -> Path:
        from tests import otel_logs

        lines = otel_logs.write_trace_file(work / "seed.jsonl").read_text().splitlines()
        conversations = {self._conversation(span) for line in lines for span in self._spans(json.loads(line))}
        return self._copies(lines, self.base // len(conversations - {None}), work / "small-otel.jsonl")

    @staticmethod
    def _spans(document: dict):
        return [span for resource in document["resourceSpans"] for scope in resource["scopeSpans"]
                for span in scope["spans"]]

    @staticmethod
    def _conversation(span: dict):
        return next((a["value"]["stringValue"] for a in span.get("attributes", [])
                     if a["key"] == "gen_ai.conversation.id"), None)

    def _copies(self, lines, copies: int, path: Path) -> Path:
        """Copy k of each line: its conversation id C named C~cK, its trace id T a new one."""
        with open(path, "w") as out:
            for copy in range(copies):
                for line in lines:
                    document = json.loads(line)
                    for span in self._spans(document):
                        span["traceId"] = hashlib.sha256(f"{span['traceId']}/{copy}".encode()).hexdigest()[:32]
                        for attribute in span.get("attributes", []):
                            if attribute["key"] == "gen_ai.conversation.id":
                                value = attribute["value"]["stringValue"]
                                attribute["value"]["stringValue"] = f"{value}~c{copy}"
                    out.write(json.dumps(document) + "\n")
        return path

    def scaled(self, small: Path, scale: int, path: Path) -> Path:
        return self._copies(small.read_text().splitlines(), scale, path.with_suffix(".jsonl"))

    def key(self, row: dict) -> str:
        return row["trajectory_id"].split("~c")[0]

    def count(self, report: dict) -> int:
        return report["facts"]["spans"]


FORMATS = {f.name: f for f in (InspectJson, AgentDojo, Otel)}


def _files(log: Path) -> list:
    return sorted(log.rglob("*.json")) if log.is_dir() else [log]


def reader_rate(fmt, log: Path) -> float:
    """Units per CPU second of the format's reader alone, consumed in this process (one core)."""
    module = importlib.import_module(f"litmus_score.importers.{fmt.log_format}")
    units = 0
    start = time.process_time()
    for path in _files(log):
        for item in module.read_log(str(path), str(path), "agent"):
            if fmt.units == "spans" and hasattr(item, "facts"):
                units += item.facts.get("spans", 0)
            elif fmt.units != "spans" and (hasattr(item, "row") or getattr(item, "unit", False)):
                units += 1
    return units / (time.process_time() - start)


def rows_by_origin(fmt, output: Path) -> dict:
    """origin key -> the rows copied from it, their ids and positions left out."""
    rows: dict = {}
    for path in sorted((output / "trajectories").glob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            key = fmt.key(row)
            for field in fmt.ids:
                row.pop(field, None)
            rows.setdefault(key, []).append(row)
    return rows


def check(fmt, small_out: Path, output: Path, scale: int) -> int:
    """The import's units, after checking that it reconciles and that every copy equals its original."""
    manifest = json.loads((output / "import-manifest.json").read_text())
    small_manifest = json.loads((small_out / "import-manifest.json").read_text())
    totals, small_totals = manifest["totals"], small_manifest["totals"]
    written = sum(pq.read_metadata(p).num_rows for p in (output / "trajectories").glob("*.parquet"))
    assert totals["trajectories"] == written == small_totals["trajectories"] * scale, (totals, written)
    for key in ("calls", "unmapped", "calls_unmapped"):
        assert totals[key] == small_totals[key] * scale, (key, totals[key], small_totals[key])
    assert not manifest["failed_files"], manifest["failed_files"]
    small_rows, rows = rows_by_origin(fmt, small_out), rows_by_origin(fmt, output)
    assert rows.keys() == small_rows.keys(), (len(rows), len(small_rows))
    for key, copies in rows.items():
        assert len(copies) == len(small_rows[key]) * scale, key
        assert all(copy in small_rows[key] for copy in copies), key
    return sum(fmt.count(report) for report in manifest["files"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated, of {', '.join(FORMATS)}")
    parser.add_argument("--base", type=int, default=100,
                        help="units (samples, episodes, conversations) of the small log")
    parser.add_argument("--scales", default="10,100", help="comma-separated multiples of the small log")
    args = parser.parse_args()
    print(f"{'format':>12} {'scale':>5} {'units':>8} {'log MiB':>8} {'reader/s':>9} {'import s':>9} {'import/s':>9} "
          f"{'peak RSS MiB':>13}  outputs")
    for name in args.formats.split(","):
        fmt = FORMATS[name](args.base)
        with tempfile.TemporaryDirectory(prefix=f"litmus-import-{name}-") as work:
            work = Path(work)
            small = fmt.small(work)
            import_once(small, work / "out-small", fmt.log_format)
            for scale in (int(n) for n in args.scales.split(",")):
                log = fmt.scaled(small, scale, work / f"log-{scale}")
                rate = reader_rate(fmt, log)
                elapsed, peak = import_once(log, work / f"out-{scale}", fmt.log_format)
                units = check(fmt, work / "out-small", work / f"out-{scale}", scale)
                size = sum(p.stat().st_size for p in _files(log)) / 2**20
                print(f"{name:>12} {scale:>5} {units:>8} {size:>8.1f} {rate:>9.0f} {elapsed:>9.1f} "
                      f"{units / elapsed:>9.0f} {peak:>13.0f}  reconcile, equal the small log's", flush=True)


if __name__ == "__main__":
    main()
