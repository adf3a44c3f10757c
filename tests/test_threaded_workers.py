"""Worker threads never cut an element in two (pipeline.threaded_runner).

The one job (`score --input_format agentdojo`, default options) died in about
one run in three on real logs: Beam's threaded workers flushed their output
once a second from a timer thread, in the middle of writing a batch, and the
next stage decoded a batch from half its bytes. This test runs the job's
import stage on real-shaped episodes, its batches both dealt out to the next
stage's workers and grouped by file (the two ways the runner reads a
PCollection's messages), on the workers a default local run starts.
"""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.util import assert_that, equal_to

from pipeline.options import THREADED_RUNNER, fit_local_workers, with_local_parallelism
from tests.agentdojo_episodes import write_episodes
from tests.importers_support import require
from transforms import schema as s
from transforms.imports import ImportToScore

require("agentdojo")  # the importer reads episodes with AgentDojo's own model
pytestmark = pytest.mark.slow

RUNS = 4


def _files_of_batches(batches) -> tuple:
    """(file, trajectories) of each file, counted row by row and from the batches grouped by file."""
    counted = (batches
               | "Files of rows" >> beam.FlatMap(lambda batch: [(f, 1) for f in batch[s.SOURCE_FILE].to_pylist()])
               | "Count per file" >> beam.CombinePerKey(sum))
    grouped = (batches
               | "Key by file" >> beam.Map(lambda batch: (batch[s.SOURCE_FILE][0].as_py(), batch))
               .with_output_types(tuple[str, pa.RecordBatch])
               | "Group by file" >> beam.GroupByKey()
               | "Rows per file" >> beam.MapTuple(lambda path, batches: (path, sum(b.num_rows for b in batches))))
    return counted, grouped


def test_a_default_local_run_imports_and_groups_real_shaped_batches_every_time(tmp_path, monkeypatch):
    """On FnApiRunner's own threads this failed in 9 of 11 runs (docs/testing.md)."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    options = PipelineOptions(with_local_parallelism([]))
    fit_local_workers(options, None)  # the threads a run of more than a few MiB gets
    assert options.view_as(StandardOptions).runner == THREADED_RUNNER
    paths = write_episodes(tmp_path / "logs", 150, seed=7)
    expected = [(str(path), 1) for path in paths]  # one trajectory an episode
    for _ in range(RUNS):
        with beam.Pipeline(options=options) as p:
            batches = (p | "Import" >> ImportToScore("agentdojo", [str(tmp_path / "logs")], "agent"))["batches"]
            counted, grouped = _files_of_batches(batches)
            assert_that(counted, equal_to(expected), label="Every row once")
            assert_that(grouped, equal_to(expected), label="Every batch whole")

