"""The import stages: log files in, contract trajectories, unmapped entries and reports out.

    Log parts -> Spread parts -> Import part --> trajectories (pa.Tables)
                                     |---------> unmapped entries
                                     +---------> part reports -> Merge reports per file -> import-manifest.json

A part is one unit of work: a whole log file, or, where the format cuts its
files (Inspect .eval logs), a range of its bytes, whose samples it reads, so
that one big log is read by many workers. A file the format's library cannot
read (corrupt, foreign) fails alone: its report names the error, and the
other files are imported. The mapping itself is the format's module in
litmus_score.importers; the accounting is litmus_score.importers.manifest.

`import` writes the trajectories as shards (ImportLogs, WriteImport);
`score --input_format` hands them to the scoring stages of the same job
as the read stage's batches instead (ImportToScore), with no file between.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from litmus_score.importers import importer
from litmus_score.importers import rows as r
from litmus_score.importers.manifest import (
    count_trajectory,
    count_unmapped,
    manifest_document,
    merge_reports,
    new_report,
    units_unread,
)
from litmus_score.scoring.layout import IMPORT_MANIFEST_FILE, SHARD_KIND, TRAJECTORIES_DIR, UNMAPPED_DIR
from litmus_score.scoring.trajectory import DEFAULT_BOUNDS
from transforms import (
    NAMESPACE,
    coders,  # noqa: F401  (registers the Arrow element coders)
)
from transforms.conform import UNREADABLE, conform_batch
from transforms.elements import Tag
from transforms.files import to_json, write_text
from transforms.logfiles import SkippedLog, local_copy, log_identities, match_logs, not_a_file, plan_parts
from transforms.shardfiles import identify, what_changed
from transforms.write import FileSet, WriteBundleFn, commit_files

UNMAPPED_TAG, REPORTS_TAG = "unmapped", "reports"
# Trajectories per emitted table: small enough that a file's rows never pile
# up in memory, large enough that Parquet row groups are not slivers.
CHUNK_ROWS = 512
# The last plans this worker process made, by path and size: a log's ranges
# reach a worker one by one, and each would otherwise read the log's
# directory again. Shared by the runner's threads in the process.
_PLANS: dict = {}
_PLANS_KEPT = 2
_PLANS_LOCK = threading.Lock()


def _plan(module, path: str, handle):
    key = (path, handle.seek(0, 2))  # a log rewritten since is planned again
    with _PLANS_LOCK:
        plan = _PLANS.get(key)
    if plan is None:
        plan = module.plan_log(handle)
        with _PLANS_LOCK:
            _PLANS[key] = plan
            while len(_PLANS) > _PLANS_KEPT:
                _PLANS.pop(next(iter(_PLANS)))
    return plan


class LogChanged(Exception):
    """A log that, once a work item had read it, was no longer the file the run matched."""


@beam.typehints.with_input_types(tuple[str, tuple[int, int | None] | None])
class ImportLogFn(beam.DoFn):
    """A work item, (path, byte range or None for the whole file) -> pa.Tables
    of trajectories; unmapped entries and one report per work item on the
    tagged outputs.

    Each trajectory's position is its unit's among the log's units (read in
    order, whatever the ranges). Rows and entries are gathered over the
    bundle into tables of about CHUNK_ROWS, so that thousands of small logs
    (an AgentDojo folder, one episode a file) do not become thousands of
    one-row tables, and a log of millions of damaged units holds no more
    than that many entries at once.

    `identities` (path -> FileIdentity, from when the logs were matched):
    a log found changed once an item of it is read (grown, replaced, cut) is
    not imported whole, as a shard that changed is not read whole: what was
    read stays imported and counted, and the file's report names the change."""

    def __init__(self, log_format: str, principal: str, options=None, identities: dict | None = None):
        self._format = log_format
        self._principal = principal
        self._options = dict(options or {})
        self._identities = dict(identities or {})
        self._failed = Metrics.counter(NAMESPACE, "log_parts_failed")
        self._trajectories = Metrics.counter(NAMESPACE, "trajectories_imported")
        self._unmapped = Metrics.counter(NAMESPACE, "entries_unmapped")

    def setup(self):
        self._module = importer(self._format)
        self._schema = r.shard_schema(self._module.EXTRA_FIELDS)

    def start_bundle(self):
        self._tables: list = []
        self._table_rows = 0
        self._misses: list = []

    @contextlib.contextmanager
    def _items(self, path: str, byte_range):
        """(the position of the first unit read, the importer's items) of a work item."""
        if byte_range is None:
            with local_copy(path) as local:
                yield 0, self._module.read_log(local, path, self._principal, **self._options)
            return
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            plan = _plan(self._module, path, handle)
            start, stop = byte_range
            yield (self._module.first_unit(plan, start),
                   self._module.read_range(handle, path, plan, start, stop, self._principal, **self._options))

    def process(self, work: tuple):
        path, byte_range = work
        report = new_report(path)
        rows, positions = [], []
        skipped = not_a_file(path)
        self.start_item()
        try:
            if skipped:
                raise SkippedLog(skipped)
            with self._items(path, byte_range) as (unit, items):
                for item in items:
                    if isinstance(item, r.FileSummary):
                        report["facts"].update(item.facts)
                        report["units_declared"] = item.units_declared
                    elif isinstance(item, r.Unmapped):
                        count_unmapped(report, item)
                        unit += item.unit
                        self._misses.append({"file": path, "position": item.position, "reason": item.reason,
                                             "detail": r.bounded(item.detail), "unit": item.unit,
                                             "call": item.call, "trajectory_id": item.trajectory_id})
                        if len(self._misses) >= CHUNK_ROWS:
                            yield self._unmapped_out()
                    else:
                        count_trajectory(report, item)
                        rows.append(item.row)
                        positions.append(unit)
                        unit += 1
                        if len(rows) >= CHUNK_ROWS:
                            yield from self._gather(path, positions, rows)
                            rows, positions = [], []
            change = self._changed(path)
            if change:
                raise LogChanged(f"the log changed after the run matched it ({change}); its rows may mix two "
                                 "versions")
        except Exception as error:
            # A foreign or damaged file makes a format's library raise
            # anything; the file fails alone and the report names the fault.
            # What it yielded before the fault stays imported and counted.
            logging.warning("cannot import %s: %s", path, error)
            self._failed.inc()
            report["error"] = r.bounded(str(error) if skipped else f"{type(error).__name__}: {error}")
            report["skipped"] = bool(skipped)
        if rows:
            yield from self._gather(path, positions, rows)
        self._trajectories.inc(report["trajectories"])
        self._unmapped.inc(report["unmapped"])
        report["unmapped_by_reason"] = dict(sorted(report["unmapped_by_reason"].items()))
        report["principal_attribute"] = {context: dict(sorted(used.items()))
                                         for context, used in report["principal_attribute"].items()}
        yield from self.report_out(report)

    def _changed(self, path: str) -> str | None:
        recorded = self._identities.get(path)
        if recorded is None:
            return None
        try:
            return what_changed(recorded, identify(path))
        except UNREADABLE:
            return "it can no longer be opened"

    def finish_bundle(self):
        if self._tables:
            for out in self._gathered():
                yield GlobalWindows.windowed_value(out)
        if self._misses:
            yield self._unmapped_out(GlobalWindows.windowed_value)

    def _gather(self, path: str, positions: list, rows: list):
        """Keeps a table of a work item's rows (each at its unit's position in
        `path`); yields what is gathered once it is CHUNK_ROWS."""
        self._tables.append(pa.Table.from_pylist(rows, schema=self._schema))
        self._table_rows += len(rows)
        if self._table_rows >= CHUNK_ROWS:
            yield from self._gathered()

    def _gathered(self):
        table = pa.concat_tables(self._tables)
        self._tables, self._table_rows = [], 0
        yield table

    def _unmapped_out(self, wrap=lambda value: value):
        table = pa.Table.from_pylist(self._misses, schema=r.UNMAPPED)
        self._misses = []
        return beam.pvalue.TaggedOutput(UNMAPPED_TAG, wrap(table))

    def start_item(self):
        """Called as each work item begins."""

    def report_out(self, report: dict):
        """What leaves for a work item's report, once its trajectories are gathered."""
        yield beam.pvalue.TaggedOutput(REPORTS_TAG, report)


class ImportToScoreFn(ImportLogFn):
    """A work item -> its trajectories as the read stage's batches
    (transforms.read), for the scoring stages: conformed, each row's
    provenance the log and its unit's position among the log's; and, beside
    its import report, the item's report as an input of the run (a shard's
    report, its rows the trajectories imported; merged per log)."""

    def __init__(self, log_format: str, principal: str, options=None,
                 max_text_bytes: int = DEFAULT_BOUNDS.max_text_bytes, identities: dict | None = None):
        super().__init__(log_format, principal, options, identities)
        self._max_text_bytes = max_text_bytes

    def start_item(self):
        self._issues: list = []

    def _gather(self, path: str, positions: list, rows: list):
        """A work item's rows as batches of their own: the scoring stages take
        a batch's rows to be one file's (its provenance), so no two logs share one."""
        for batch in pa.Table.from_pylist(rows, schema=self._schema).to_batches():
            conformed, issues = conform_batch(batch, path, positions[:batch.num_rows], self._max_text_bytes)
            positions = positions[batch.num_rows:]
            self._issues += [issue for issue in issues if issue not in self._issues]
            yield conformed

    def report_out(self, report: dict):
        yield from super().report_out(report)
        # The keys of a shard's report (transforms.read.new_report): its rows read the trajectories
        # imported, its rows declared those and the units not imported (why, its import report says),
        # the units a failed log never read added once its parts are merged (input_report).
        yield beam.pvalue.TaggedOutput(Tag.SHARD_REPORTS, {
            "file": report["file"], "aliases": [], "copies": [],
            "rows_declared": report["trajectories"] + report["not_imported"]["units"],
            "rows_read": report["trajectories"], "row_groups": None, "row_groups_unreadable": [],
            "issues": self._issues, "error": report["error"],
            _UNITS: {"units": report["units"], "units_declared": report["units_declared"]}})


# What a log's input report carries until its parts are merged: its units read and declared.
_UNITS = "import_units"


def merge_shard_reports(reports) -> dict:
    """One log's report as an input of the run, of its work items' (associative,
    as merge_reports): the rows and units add up, the issues are all of theirs,
    sorted, and the error is the least of theirs, whatever the split."""
    reports = list(reports)
    merged = dict(reports[0])
    for key in ("rows_declared", "rows_read"):
        merged[key] = sum(report[key] for report in reports)
    declared = [report[_UNITS]["units_declared"] for report in reports if report[_UNITS]["units_declared"] is not None]
    merged[_UNITS] = {"units": sum(report[_UNITS]["units"] for report in reports),
                      "units_declared": sum(declared) if declared else None}
    merged["issues"] = sorted({issue for report in reports for issue in report["issues"]})
    errors = [report["error"] for report in reports if report["error"]]
    merged["error"] = min(errors) if errors else None
    return merged


def input_report(merged: dict) -> dict:
    """A log's merged report as an input of the run: the units a failed log never
    read (units_unread, as its import report counts them) are rows it declares."""
    report = dict(merged)
    units = report.pop(_UNITS)
    report["rows_declared"] += units_unread({**units, "error": report["error"]})
    return report


def _per_file(reports: beam.PCollection, merge, label: str) -> beam.PCollection:
    """One report a file, of its work items' reports."""
    return (reports
            | f"Key {label} by file" >> beam.Map(lambda report: (report["file"], report))
            | f"Merge {label} per file" >> beam.CombinePerKey(merge)
            | f"{label.capitalize()} per file" >> beam.Values())


class ImportLogs(beam.PTransform):
    """LOGS (files, folders, globs) of one format -> a dict of PCollections:
    trajectories (pa.Tables on `schema`), unmapped (pa.Tables on
    rows.UNMAPPED) and reports (one dict per file).

    Globs are matched when the transform is built, so a pattern that matches
    nothing fails before any work is launched. `principal` is the acting
    identity where the log names none; `harness_verdict` (Inspect logs) names
    the sample score kept as the harness's own verdict; `max_sample_mib`
    (Inspect logs) bounds one sample's decompressed record; `identity_attributes`
    (OTel, comma-separated) the ordered span attributes that name the acting
    identity; `bytes_per_part` the bytes one work item reads of a log its
    format cuts into ranges (None: the format's own size).
    """

    def __init__(self, log_format: str, patterns, principal: str, harness_verdict: str | None = None,
                 max_sample_mib: float | None = None, identity_attributes: str | None = None,
                 bytes_per_part: int | None = None):
        super().__init__()
        module = importer(log_format)
        if bytes_per_part is not None and not bytes_per_part >= 1:
            raise ValueError(f"bytes_per_part {bytes_per_part}: expected a positive number of bytes")
        if not principal:
            raise ValueError("the default principal must be a non-empty string")
        self._options: dict[str, Any] = {}
        # The bound on one sample's decompressed record (Inspect logs); None where the format has none.
        self.max_sample_mib = None
        if "max_sample_mib" in getattr(module, "OPTIONS", ()):
            self.max_sample_mib = module.DEFAULT_MAX_SAMPLE_MIB if max_sample_mib is None else max_sample_mib
            if not self.max_sample_mib > 0:
                raise ValueError(f"--max_sample_mib {max_sample_mib}: expected a positive number of MiB")
            self._options["max_sample_mib"] = self.max_sample_mib
        elif max_sample_mib is not None:
            raise ValueError(f"--max_sample_mib bounds a sample of Inspect logs; {log_format} logs have none")
        if harness_verdict is not None:
            if "harness_verdict" not in getattr(module, "OPTIONS", ()):
                raise ValueError(f"--harness_verdict names a score of Inspect logs; {log_format} logs have none "
                                 "to choose (agentdojo keeps its own `security`)")
            module.HarnessVerdict.parse(harness_verdict)  # a ValueError naming it, before any work
            self._options["harness_verdict"] = harness_verdict
        if identity_attributes is not None:
            if "identity_attributes" not in getattr(module, "OPTIONS", ()):
                raise ValueError(f"--identity_attributes names OTel span attributes; {log_format} logs have none")
            self._options["identity_attributes"] = module.identity_attributes(identity_attributes)
        # The manifest says which attributes were tried, in order, where the format reads several.
        tried = self._options.get("identity_attributes", getattr(module, "IDENTITY_ATTRIBUTES", None))
        self.identity_header = {} if tried is None else {"identity_attributes": list(tried)}
        self._format, self._principal = log_format, principal
        self.files = match_logs(list(patterns), module.SUFFIXES)
        # What each log was when matched (None: it cannot be opened; the import names why): checked once read.
        self.identities = dict(log_identities(self.files))
        # Known from the files' sizes when the job is built, so that each work item is an element of its own.
        self.parts = plan_parts(self.files, getattr(module, "SPLITS", ()),
                                bytes_per_part or getattr(module, "BYTES_PER_PART", None))
        self.schema = r.shard_schema(module.EXTRA_FIELDS)

    def parts_of_logs(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[tuple]:
        """The work items, spread over the workers: a log, or a range of a big log's bytes."""
        return (pbegin
                | "Log parts" >> beam.Create(self.parts, reshuffle=False)
                | "Spread parts" >> beam.Reshuffle())

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, beam.PCollection]:
        imported = (
            self.parts_of_logs(pbegin)
            | "Import part"
            >> beam.ParDo(ImportLogFn(self._format, self._principal, self._options, self.identities))
            .with_output_types(pa.Table, **{UNMAPPED_TAG: pa.Table, REPORTS_TAG: dict})
            .with_outputs(UNMAPPED_TAG, REPORTS_TAG, main=TRAJECTORIES_DIR)
        )
        return {TRAJECTORIES_DIR: imported[TRAJECTORIES_DIR], UNMAPPED_TAG: imported[UNMAPPED_TAG],
                REPORTS_TAG: _per_file(imported[REPORTS_TAG], merge_reports, "reports")}


class ImportToScore(ImportLogs):
    """ImportLogs whose trajectories go on to the scoring stages of the same
    job, no file between them: a dict of `batches` (the read stage's
    RecordBatches, ImportToScoreFn), Tag.SHARD_REPORTS (one per log, as a
    shard's), `unmapped` and `reports` (ImportLogs'). `max_text_bytes` is
    the read stage's bound on one text."""

    def __init__(self, *args, max_text_bytes: int = DEFAULT_BOUNDS.max_text_bytes, **kwargs):
        super().__init__(*args, **kwargs)
        self._max_text_bytes = max_text_bytes

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, beam.PCollection]:
        imported = (
            self.parts_of_logs(pbegin)
            | "Import part"
            >> beam.ParDo(ImportToScoreFn(self._format, self._principal, self._options, self._max_text_bytes,
                                         self.identities))
            .with_output_types(pa.RecordBatch, **{UNMAPPED_TAG: pa.Table, REPORTS_TAG: dict,
                                                  Tag.SHARD_REPORTS: dict})
            .with_outputs(UNMAPPED_TAG, REPORTS_TAG, Tag.SHARD_REPORTS, main="batches")
        )
        return {"batches": imported["batches"], UNMAPPED_TAG: imported[UNMAPPED_TAG],
                REPORTS_TAG: _per_file(imported[REPORTS_TAG], merge_reports, "reports"),
                Tag.SHARD_REPORTS: (_per_file(imported[Tag.SHARD_REPORTS], merge_shard_reports, "input reports")
                                    | "Count units not read" >> beam.Map(input_report))}


_REPORT, _WRITTEN = "report", "written"


@beam.typehints.with_input_types(**{TRAJECTORIES_DIR: pa.Table, UNMAPPED_TAG: pa.Table, REPORTS_TAG: dict})
class WriteImport(beam.PTransform):
    """Writes an ImportLogs result under `output`: trajectories/ and unmapped/
    Parquet files (committed as the scoring job commits its own), then
    import-manifest.json, which lists them."""

    def __init__(self, output: str, header: dict, schema: pa.Schema):
        super().__init__()
        self._output = output.rstrip("/")
        self._header = header
        # The trajectories are shards to score; unmapped/ says it is no shard.
        self._tables = {TRAJECTORIES_DIR: FileSet(TRAJECTORIES_DIR, "part", schema, kind=SHARD_KIND),
                        UNMAPPED_DIR: FileSet(UNMAPPED_DIR, "part", r.UNMAPPED)}

    def expand(self, imported: dict[str, beam.PCollection]) -> beam.PCollection[None]:
        output, header, file_sets = self._output, self._header, list(self._tables.values())
        temp_dir = FileSystems.join(output, f".temp-{uuid.uuid4().hex}")
        manifest_path = FileSystems.join(output, IMPORT_MANIFEST_FILE)

        def finish(entries) -> None:
            written = [value for kind, value in entries if kind == _WRITTEN]
            committed = commit_files(written, file_sets, output, temp_dir)
            reports = [value for kind, value in entries if kind == _REPORT]
            write_text(manifest_path, to_json(manifest_document(reports, header, committed)))

        sources = {TRAJECTORIES_DIR: imported[TRAJECTORIES_DIR], UNMAPPED_DIR: imported[UNMAPPED_TAG]}
        written = [
            sources[name]
            | f"Write {name}" >> beam.ParDo(WriteBundleFn(files, temp_dir))
            | f"Tag {name} files" >> beam.Map(lambda file: (_WRITTEN, file))
            for name, files in self._tables.items()
        ]
        reports = imported[REPORTS_TAG] | "Tag reports" >> beam.Map(lambda report: (_REPORT, report))
        return (
            [reports, *written]
            | "Gather files" >> beam.Flatten()
            # Never empty: every log file has a report.
            | "List files" >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
            | "Commit files, write import-manifest.json" >> beam.Map(finish)
        )
