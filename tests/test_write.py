"""Writing outputs: files commit from the bundles that succeeded, numbered, with no temporary left."""

import hashlib

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from tests.conftest import load_json
from transforms import schema as s
from transforms.write import TEMP_PREFIX, FileSet, WriteBundleFn, WriteOutputs, commit_files

SCORED = FileSet("scored", "part", s.SCORED)
FAILED = FileSet("unscored", "failed", s.UNSCORED)


def scored_rows(start: int, n: int) -> pa.Table:
    rows = [{"run_id": "r", "agent": "a", "trajectory_id": f"t{i}", "call_id": "c", "step": 1, "tool": "x",
             "category": "benign", "realized": True, "proposal_verdict": "allow", "commit_verdict": "allow",
             "resolution_context": "commit", "proposal_verdict_source": "recorded",
             "commit_verdict_source": "recorded", "policy_disagreement": False, "source_file": "f.parquet",
             "source_row": i} for i in range(start, start + n)]
    return pa.Table.from_pylist(rows, schema=s.SCORED)


def test_commit_numbers_the_committed_files_and_drops_failed_attempts(tmp_path):
    temp = tmp_path / (TEMP_PREFIX + "x")
    temp.mkdir()
    for name, start in (("a", 0), ("b", 5), ("orphan", 100)):
        pq.write_table(scored_rows(start, 5), temp / f"{name}.parquet")
    written = [(SCORED.key, {"path": str(temp / "b.parquet"), "rows": 5, "bytes": 1, "sha256": "b"}),
               (SCORED.key, {"path": str(temp / "a.parquet"), "rows": 5, "bytes": 1, "sha256": "a"})]

    committed = commit_files(written, [SCORED, FAILED], str(tmp_path), str(temp))

    assert [(e["path"], e["rows"], e["sha256"]) for e in committed[:2]] == [
        ("scored/part-00000-of-00002.parquet", 5, "a"), ("scored/part-00001-of-00002.parquet", 5, "b")]
    empty_entry = committed[2]
    assert (empty_entry["path"], empty_entry["rows"]) == ("unscored/failed-00000-of-00001.parquet", 0)
    empty_file = tmp_path / "unscored" / "failed-00000-of-00001.parquet"
    assert empty_entry["sha256"] == hashlib.sha256(empty_file.read_bytes()).hexdigest()
    assert empty_entry["bytes"] == empty_file.stat().st_size
    assert sorted(p.name for p in (tmp_path / "scored").iterdir()) == [
        "part-00000-of-00002.parquet", "part-00001-of-00002.parquet"]
    assert sorted(pq.read_table(tmp_path / "scored")["source_row"].to_pylist()) == list(range(10))
    # A file set no bundle wrote still exists, empty, with its schema.
    empty = pq.read_table(tmp_path / "unscored" / "failed-00000-of-00001.parquet")
    assert empty.num_rows == 0 and empty.schema.equals(s.UNSCORED)
    assert not temp.exists()  # the orphan of a failed attempt went with it
    # Run again (a retried commit): nothing moves, nothing fails.
    assert commit_files(written, [SCORED, FAILED], str(tmp_path), str(temp))[:2] == committed[:2]
    assert pq.read_table(tmp_path / "scored").num_rows == 10


def test_write_outputs_end_to_end_with_two_workers(tmp_path):
    options = PipelineOptions(["--direct_num_workers=2", "--direct_running_mode=multi_threading"])
    with TestPipeline(runner="FnApiRunner", options=options) as p:
        tables = p | "Tables" >> beam.Create([scored_rows(i * 3, 3) for i in range(8)]) | beam.Reshuffle()
        no_tables = p | "No tables" >> beam.Create([]).with_output_types(pa.Table)
        outputs = {
            "scored": tables,
            "unscored": {"failed": no_tables},
            "metrics": p | "Metrics" >> beam.Create([{"schema": "litmus-metrics/1"}]),
            "shard_reports": p | "Reports" >> beam.Create([{"file": "f.parquet", "rows_read": 24, "error": None}]),
        }
        _ = outputs | WriteOutputs(str(tmp_path), {"schema": "litmus-manifest/1"})

    names = sorted(p.name for p in (tmp_path / "scored").iterdir())
    assert names == [f"part-{i:05d}-of-{len(names):05d}.parquet" for i in range(len(names))]
    assert sorted(pq.read_table(tmp_path / "scored")["source_row"].to_pylist()) == list(range(24))
    assert pq.read_table(tmp_path / "unscored").num_rows == 0
    # Statistics where readers filter, none on per-call ids.
    chunks = pq.ParquetFile(tmp_path / "scored" / names[0]).metadata.row_group(0)
    with_statistics = {chunks.column(i).path_in_schema for i in range(chunks.num_columns)
                       if chunks.column(i).is_stats_set}
    assert {"run_id", "agent", "trajectory_id", "category"} <= with_statistics
    assert "call_id" not in with_statistics
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TEMP_PREFIX)]
    assert load_json(tmp_path / "metrics.json") == {"schema": "litmus-metrics/1"}
    manifest = load_json(tmp_path / "manifest.json")
    assert manifest["input_rows"] == 24
    assert [entry["path"] for entry in manifest["outputs"]] == [
        "metrics.json", *(f"scored/{name}" for name in names), "unscored/failed-00000-of-00001.parquet"]
    # Every file is listed with what was counted while it was written.
    for entry in manifest["outputs"]:
        data = (tmp_path / entry["path"]).read_bytes()
        assert (entry["bytes"], entry["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
        if entry["path"].endswith(".parquet"):
            assert entry["rows"] == pq.ParquetFile(tmp_path / entry["path"]).metadata.num_rows
    assert sum(e["rows"] for e in manifest["outputs"] if e["path"].startswith("scored/")) == 24
    # Written whole: no temporary name is left.
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_bundle_starts_a_new_file_after_its_row_groups_per_file(tmp_path):
    # A writer keeps each row group's metadata until it closes: a long bundle's files are closed as it goes.
    def files_hold_every_row(entries):
        assert len(entries) >= 3  # five tables, at most two to a file
        for key, entry in entries:
            metadata = pq.ParquetFile(entry["path"]).metadata
            assert key == SCORED.key and metadata.num_row_groups <= 2 and entry["rows"] == metadata.num_rows
        rows = pa.concat_tables(pq.read_table(entry["path"]) for _, entry in entries)["source_row"].to_pylist()
        assert sorted(rows) == list(range(15))

    with TestPipeline(runner="FnApiRunner") as p:
        tables = p | beam.Create([scored_rows(i * 3, 3) for i in range(5)])
        entries = tables | beam.ParDo(WriteBundleFn(SCORED, str(tmp_path), row_groups_per_file=2))
        assert_that(entries, files_hold_every_row)
