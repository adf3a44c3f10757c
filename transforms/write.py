"""Stage 6: write a run's outputs into its own folder.

    OUTPUT/metrics.json     run-level metrics (scoring-v1), sorted keys
    OUTPUT/manifest.json    what was read, how, and which files were written
    OUTPUT/evidence.json    the first cases of each kind per group, deciding call
    OUTPUT/scored/*.parquet one row per scored call
    OUTPUT/trajectories/*.parquet one row per scored trajectory, its verdicts
    OUTPUT/unscored/*.parquet one row per unscored trajectory, input row kept;
                            files named by the stage that set them aside

Parquet files are committed the way Beam's file sinks commit them, in fewer
stages: each bundle writes one file into a temporary folder, and one final
step renames the files whose bundles committed (a runner passes on only the
output of bundles that succeeded), deletes the folder with any files of
failed attempts, and writes the manifest. Every kind of file exists at least
once, empty if need be, so `scored/` and `unscored/` always read with their
schema.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from scoring.layout import (
    EVIDENCE_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    SCORED_DIR,
    SCORED_PREFIX,
    TEMP_PREFIX,
    TRAJECTORIES_DIR,
    UNSCORED_DIR,
)
from transforms import schema as s

CODEC = "snappy"


def to_json(document) -> str:
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_text(path: str, text: str) -> None:
    with FileSystems.create(path) as handle:
        handle.write(text.encode("utf-8"))


def manifest_document(reports, header: dict, outputs=()) -> dict:
    """The manifest: `header` (options, versions), the shard reports sorted by
    file, and the Parquet files written (paths relative to the output folder)."""
    files = sorted(reports, key=lambda report: report["file"])
    return {
        **header,
        "inputs": files,
        "input_rows": sum(report["rows_read"] for report in files),
        "unreadable_files": [report["file"] for report in files if report["error"]],
        "outputs": sorted(outputs),
    }


@dataclass(frozen=True)
class FileSet:
    """One kind of Parquet output: OUTPUT/folder/prefix-NNNNN-of-NNNNN.parquet.

    `statistics` and `dictionary` name the columns that get min/max
    statistics and Parquet dictionary pages (True: all).
    """

    folder: str
    prefix: str
    schema: pa.Schema
    statistics: tuple | bool = True
    dictionary: tuple | bool = True

    @property
    def key(self) -> str:
        return f"{self.folder}/{self.prefix}"

    def writer(self, handle) -> pq.ParquetWriter:
        return pq.ParquetWriter(handle, self.schema, compression=CODEC, write_statistics=self.statistics,
                                use_dictionary=self.dictionary)


# A million scored calls: statistics only where readers filter (a third of
# the writing time goes to min/max otherwise), dictionary pages only where
# values repeat (ids never do).
SCORED_FILES = FileSet(
    SCORED_DIR, SCORED_PREFIX, s.SCORED,
    statistics=("run_id", "agent", "trajectory_id", "tool", "category", "source_file"),
    dictionary=tuple(name for name in s.SCORED.names if name not in ("trajectory_id", "call_id", "source_row")),
)

TRAJECTORY_FILES = FileSet(
    TRAJECTORIES_DIR, SCORED_PREFIX, s.TRAJECTORIES,
    statistics=("run_id", "agent", "trajectory_id", "over_penalized", "under_penalized", "execution_hallucination"),
    dictionary=tuple(name for name in s.TRAJECTORIES.names if name not in ("trajectory_id", "task_id", "source_row")),
)


def _write_empty(path: str, files: FileSet) -> None:
    """A Parquet file with the file set's schema and no rows."""
    with FileSystems.create(path) as handle, files.writer(handle):
        pass


class WriteBundleFn(beam.DoFn):
    """pa.Tables -> one temporary Parquet file per bundle; emits (file set key, temporary path)."""

    def __init__(self, files: FileSet, temp_dir: str):
        self._files = files
        self._temp_dir = temp_dir

    def start_bundle(self):
        self._path = self._handle = self._writer = None

    def process(self, table: pa.Table):
        if self._writer is None:
            # A fresh name per attempt: a retried bundle never meets its earlier file.
            self._path = FileSystems.join(self._temp_dir, f"{self._files.prefix}-{uuid.uuid4().hex}.parquet")
            self._handle = FileSystems.create(self._path)
            self._writer = self._files.writer(self._handle)
        self._writer.write_table(table)

    def finish_bundle(self):
        if self._writer is not None:
            self._writer.close()
            self._handle.close()
            yield GlobalWindows.windowed_value((self._files.key, self._path))


def commit_files(written, file_sets, output: str, temp_dir: str) -> list:
    """Renames the committed bundles' files into place, numbered per file set,
    and deletes the temporary folder; returns the files' paths relative to
    `output`. Safe to run again: moved files are skipped."""
    for folder in {files.folder for files in file_sets}:
        if not FileSystems.exists(FileSystems.join(output, folder)):
            FileSystems.mkdirs(FileSystems.join(output, folder))
    sources, destinations, committed = [], [], []
    for files in file_sets:
        temporary = sorted(path for key, path in written if key == files.key)
        named = lambda i, n: f"{files.folder}/{files.prefix}-{i:05d}-of-{n:05d}.parquet"  # noqa: E731
        if not temporary:
            committed.append(named(0, 1))
            _write_empty(FileSystems.join(output, committed[-1]), files)
        for i, path in enumerate(temporary):
            committed.append(named(i, len(temporary)))
            if FileSystems.exists(path):
                sources.append(path)
                destinations.append(FileSystems.join(output, committed[-1]))
    if sources:
        FileSystems.rename(sources, destinations)
    if FileSystems.exists(temp_dir):
        FileSystems.delete([temp_dir])
    return committed


# What the finishing step collects: shard reports and written files.
_READ, _WRITTEN = "read", "written"


class WriteOutputs(beam.PTransform):
    """Writes scored and UNSCORED tables, metrics and the manifest under `output`.

    Takes a dict of PCollections: scored (pa.Tables), trajectories (pa.Tables,
    optional), evidence (one document, optional), unscored (a dict of
    name -> PCollection of pa.Tables, one file set per name), metrics (one
    document) and shard_reports (one dict per input file; a run reads at
    least one).
    """

    def __init__(self, output: str, manifest_header: dict):
        super().__init__()
        self._output = output.rstrip("/")
        self._header = manifest_header

    def _path(self, *parts: str) -> str:
        return FileSystems.join(self._output, *parts)

    def expand(self, outputs):
        header, output = self._header, self._output
        temp_dir, manifest_path = self._path(TEMP_PREFIX + uuid.uuid4().hex), self._path(MANIFEST_FILE)
        tables = {SCORED_FILES: outputs["scored"]} | (
            {TRAJECTORY_FILES: outputs["trajectories"]} if "trajectories" in outputs else {}) | {
            FileSet(UNSCORED_DIR, name, s.UNSCORED): records for name, records in outputs["unscored"].items()
        }
        file_sets = list(tables)

        def finish(entries) -> None:
            written = [value for kind, value in entries if kind == _WRITTEN]
            committed = commit_files(written, file_sets, output, temp_dir)
            reports = [value for kind, value in entries if kind == _READ]
            write_text(manifest_path, to_json(manifest_document(reports, header, committed)))

        metrics_path = self._path(METRICS_FILE)
        outputs["metrics"] | "Write metrics.json" >> beam.Map(lambda doc: write_text(metrics_path, to_json(doc)))
        if "evidence" in outputs:
            evidence_path = self._path(EVIDENCE_FILE)
            outputs["evidence"] | "Write evidence.json" >> beam.Map(lambda doc: write_text(evidence_path, to_json(doc)))
        # One finishing step for files and manifest: each global combine
        # costs the runner several stages.
        written = [
            records
            | f"Write {files.key}" >> beam.ParDo(WriteBundleFn(files, temp_dir))
            | f"Tag {files.key} files" >> beam.Map(lambda file: (_WRITTEN, file))
            for files, records in tables.items()
        ]
        reports = outputs["shard_reports"] | "Tag shard reports" >> beam.Map(lambda report: (_READ, report))
        return (
            [reports, *written]
            | "Gather files" >> beam.Flatten()
            # Never empty: every input file has a shard report.
            | "List files" >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
            | "Commit files, write manifest.json" >> beam.Map(finish)
        )
