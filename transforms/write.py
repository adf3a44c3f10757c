"""Stage 6: write a run's outputs into its own folder.

    OUTPUT/metrics.json     run-level metrics (scoring-v1), sorted keys
    OUTPUT/manifest.json    what was read, how, and which files were written
    OUTPUT/evidence.json    the first cases of each kind per group, deciding call
    OUTPUT/scored/*.parquet one row per scored call
    OUTPUT/trajectories/*.parquet one row per scored trajectory, its verdicts
    OUTPUT/unscored/*.parquet one row per unscored trajectory, input row kept;
                            files named by the stage that set them aside
    OUTPUT/unmapped/*.parquet a run that imports its logs: what of them became
                            no trajectory (the manifest's `import` counts it)

Parquet files are committed the way Beam's file sinks commit them, in fewer
stages: each bundle writes its files (a new one every `ROW_GROUPS_PER_FILE`
row groups) into a temporary folder, and one final
step renames the files whose bundles committed (a runner passes on only the
output of bundles that succeeded), deletes the folder with any files of
failed attempts, and writes the manifest. Every kind of file exists at least
once, empty if need be, so `scored/` and `unscored/` always read with their
schema, and each says in its Parquet key-value metadata what it is, so
that no later run reads it as a trajectory shard (transforms.shardfiles).
Each file's rows, size and sha256 are counted while it is written
(no read-back), and renaming keeps them true. metrics.json and the manifest
are written whole or not at all: under a temporary name, then renamed.
The launcher completes the run (pipeline.publish): report, manifest, _SUCCESS.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from litmus_score.importers import manifest as import_manifest
from litmus_score.importers.rows import UNMAPPED
from litmus_score.scoring.layout import (
    EVIDENCE_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    OUTPUT_KIND_KEY,
    SCORED_DIR,
    SCORED_PREFIX,
    TEMP_PREFIX,
    TRAJECTORIES_DIR,
    UNMAPPED_DIR,
    UNSCORED_DIR,
)
from transforms import schema as s
from transforms.files import DigestingFile, delete_exactly, objects_under, rename_exactly, to_json, write_whole

CODEC = "snappy"


def manifest_document(reports, header: dict, outputs=(), imported: dict | None = None) -> dict:
    """The manifest: `header` (options, versions), the shard reports sorted by
    file, and every file written (path relative to the output folder, rows,
    bytes, sha256), sorted by path. `imported`, where the run imported its
    logs, is the import's manifest (litmus_score.importers.manifest), kept
    as `import`; its unmapped/ files are among the run's outputs."""
    files = sorted(reports, key=lambda report: report["file"])
    return {
        **header,
        **({"import": imported} if imported is not None else {}),
        "inputs": files,
        "input_rows": sum(report["rows_read"] for report in files),
        "unreadable_files": [report["file"] for report in files if report["error"]],
        "outputs": sorted(outputs, key=lambda entry: entry["path"]),
    }


@dataclass(frozen=True)
class FileSet:
    """One kind of Parquet output: OUTPUT/folder/prefix-NNNNN-of-NNNNN.parquet.

    `statistics` and `dictionary` name the columns that get min/max
    statistics and Parquet dictionary pages (True: all). Every file says
    what it is in its key-value metadata (layout.OUTPUT_KIND_KEY): `kind`,
    by default the folder's name; only layout.SHARD_KIND is read as input.
    """

    folder: str
    prefix: str
    schema: pa.Schema
    statistics: tuple | bool = True
    dictionary: tuple | bool = True
    kind: str | None = None

    @property
    def key(self) -> str:
        return f"{self.folder}/{self.prefix}"

    def writer(self, handle) -> pq.ParquetWriter:
        schema = self.schema.with_metadata({**(self.schema.metadata or {}), OUTPUT_KIND_KEY: self.kind or self.folder})
        return pq.ParquetWriter(handle, schema, compression=CODEC, write_statistics=self.statistics,
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


# Output key -> its file set; `unscored` holds one file set per stage. A new
# kind of output is one entry here (and its folder name in litmus_score.scoring.layout).
FILE_SETS = {"scored": SCORED_FILES, "trajectories": TRAJECTORY_FILES}


def _write_empty(path: str, files: FileSet) -> DigestingFile:
    """A Parquet file with the file set's schema and no rows."""
    with FileSystems.create(path) as handle:
        digesting = DigestingFile(handle)
        with files.writer(digesting):
            pass
    return digesting


# A Parquet writer keeps every row group's metadata until it closes (about 24 KB a row group
# of scored/, one a table written): a bundle as long as a whole run's input would hold memory
# in proportion to it. 128 row groups of scored/ are about 2.7M calls, 35 MB.
ROW_GROUPS_PER_FILE = 128


@beam.typehints.with_input_types(pa.Table)
@beam.typehints.with_output_types(tuple[str, dict])
class WriteBundleFn(beam.DoFn):
    """pa.Tables -> temporary Parquet files, one per bundle and per
    `row_groups_per_file` tables; emits (file set key, entry) per file: the
    temporary path with the file's rows, bytes and sha256."""

    def __init__(self, files: FileSet, temp_dir: str, row_groups_per_file: int = ROW_GROUPS_PER_FILE):
        self._files = files
        self._temp_dir = temp_dir
        self._row_groups_per_file = row_groups_per_file

    def start_bundle(self):
        # Path, file and writer are opened together, at a file's first table.
        self._path: str | None = None
        self._file: DigestingFile | None = None
        self._writer: pq.ParquetWriter | None = None

    def process(self, table: pa.Table) -> Iterator[tuple[str, dict]]:
        if self._writer is None:
            # A fresh name per attempt: a retried bundle never meets its earlier file.
            self._path = FileSystems.join(self._temp_dir, f"{self._files.prefix}-{uuid.uuid4().hex}.parquet")
            self._file = DigestingFile(FileSystems.create(self._path))
            self._writer = self._files.writer(self._file)
            self._rows = self._tables = 0
        with self._abandoned_if_failed():
            self._writer.write_table(table)
        self._rows += table.num_rows
        self._tables += 1
        if self._tables == self._row_groups_per_file:
            yield self._closed()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._writer is not None:
            yield GlobalWindows.windowed_value(self._closed())

    def _closed(self) -> tuple[str, dict]:
        """The open file, closed: its entry."""
        assert self._file is not None and self._path is not None and self._writer is not None
        with self._abandoned_if_failed():
            self._writer.close()
            self._file.close()
        self._writer = None
        return self._files.key, self._file.entry(self._path, self._rows)

    def teardown(self):
        if getattr(self, "_writer", None) is not None:  # a bundle that failed elsewhere and never finished
            self._abandon()

    @contextlib.contextmanager
    def _abandoned_if_failed(self):
        try:
            yield
        except Exception:
            self._abandon()
            raise

    def _abandon(self) -> None:
        """Gives up the bundle's file: its writer is closed into nothing, or it
        would write its footer when collected, onto a disk that may be full,
        failing where nobody can catch it (a traceback on stderr)."""
        assert self._file is not None and self._writer is not None
        self._file.abandon()
        self._writer.close()
        self._writer = None


def commit_files(written, file_sets, output: str, temp_dir: str) -> list:
    """Renames the committed bundles' files into place, numbered per file set,
    and deletes the temporary folder; returns the files' manifest entries
    (paths relative to `output`). Safe to run again: moved files are skipped."""
    for folder in {files.folder for files in file_sets}:
        if not FileSystems.exists(FileSystems.join(output, folder)):
            FileSystems.mkdirs(FileSystems.join(output, folder))
    sources, destinations, committed = [], [], []
    for files in file_sets:
        temporary = sorted((entry for key, entry in written if key == files.key), key=lambda entry: entry["path"])
        named = lambda i, n: f"{files.folder}/{files.prefix}-{i:05d}-of-{n:05d}.parquet"  # noqa: E731, B023 (called in this iteration)
        if not temporary:
            path = named(0, 1)
            committed.append(_write_empty(FileSystems.join(output, path), files).entry(path, 0))
        for i, entry in enumerate(temporary):
            committed.append({**entry, "path": named(i, len(temporary))})
            if FileSystems.exists(entry["path"]):
                sources.append(entry["path"])
                destinations.append(FileSystems.join(output, committed[-1]["path"]))
    if sources:
        rename_exactly(sources, destinations)
    _delete_folder(temp_dir)
    return committed


def _delete_folder(folder: str) -> None:
    """Deletes a local folder, or every object under an object store's prefix (which is no object itself)."""
    if FileSystems.exists(folder):
        delete_exactly([folder])
        return
    delete_exactly(objects_under(folder))


UNMAPPED_FILES = FileSet(UNMAPPED_DIR, "part", UNMAPPED)


# The outputs of pipeline.graph.ScoreTrajectories, by key; `unscored` is a dict of PCollections of them.
@beam.typehints.with_input_types(scored=pa.Table, trajectories=pa.Table, evidence=dict, unscored=pa.Table,
                                 metrics=dict, shard_reports=dict, import_reports=dict, unmapped=pa.Table)
class WriteOutputs(beam.PTransform):
    """Writes scored and UNSCORED tables, metrics and the manifest under `output`.

    Takes a dict of PCollections: scored (pa.Tables), trajectories (pa.Tables,
    optional), evidence (one document, optional), unscored (a dict of
    name -> PCollection of pa.Tables, one file set per name), metrics (one
    document) and shard_reports (one dict per input file; a run reads at
    least one; they go into the manifest unchanged). A run that imports its
    logs adds import_reports (one dict per log) and unmapped (pa.Tables),
    and `import_header`, its import manifest's header. One finishing step
    commits the Parquet files, then writes metrics.json, then the manifest
    listing them all.
    """

    def __init__(self, output: str, manifest_header: dict, import_header: dict | None = None):
        super().__init__()
        self._output = output.rstrip("/") or "/"
        self._header = manifest_header
        self._import_header = import_header

    def expand(self, outputs: dict[str, Any]) -> beam.PCollection[None]:
        header, import_header, output = self._header, self._import_header, self._output
        temp_dir = FileSystems.join(output, TEMP_PREFIX + uuid.uuid4().hex)
        tables = {files: outputs[key] for key, files in FILE_SETS.items() if key in outputs} | {
            FileSet(UNSCORED_DIR, name, s.UNSCORED): records for name, records in outputs["unscored"].items()
        }
        if import_header is not None:
            tables[UNMAPPED_FILES] = outputs["unmapped"]
        file_sets = list(tables)

        def finish(metrics: dict, reports: list, written: list, evidence=(), import_reports=()) -> None:
            committed = commit_files(written, file_sets, output, temp_dir)
            committed.append(write_whole(output, METRICS_FILE, to_json(metrics).encode("utf-8")))
            for document in evidence:
                committed.append(write_whole(output, EVIDENCE_FILE, to_json(document).encode("utf-8")))
            imported = None
            if import_header is not None:
                imported = import_manifest.manifest_document(import_reports, import_header)
                del imported["outputs"]  # its unmapped/ files are the run's outputs
            manifest = manifest_document(reports, header, committed, imported)
            write_whole(output, MANIFEST_FILE, to_json(manifest).encode("utf-8"))

        written = [
            records | f"Write {files.key}" >> beam.ParDo(WriteBundleFn(files, temp_dir))
            for files, records in tables.items()
        ] | "Gather files" >> beam.Flatten()
        # One finishing step for files, metrics and manifest, once everything else is done: the metrics
        # document (always one) goes in, what it waits for as side inputs. A step costs every run Beam's
        # work of building and translating it (docs/performance.md).
        waits_for = {"reports": outputs["shard_reports"], "written": written}
        waits_for |= {key: outputs[key] for key in ("evidence", "import_reports") if key in outputs}
        return outputs["metrics"] | "Commit files, write metrics.json and manifest.json" >> beam.Map(
            finish, **{name: beam.pvalue.AsList(each) for name, each in waits_for.items()})
