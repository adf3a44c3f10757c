"""The import job: log files in, contract shards, unmapped entries and a manifest out.

    Log parts -> Spread parts -> Import part --> trajectories/*.parquet
                                     |---------> unmapped/*.parquet
                                     +---------> part reports -> Merge reports per file -> import-manifest.json

A part is one unit of work: a whole log file, or, where the format splits
its files (Inspect .eval logs), a range of its bytes, whose samples it
reads, so that one big log is read by many workers. A file the format's library cannot read
(corrupt, foreign) fails alone: its report names the error, and the other
files are imported.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import logging
import os
import shutil
import stat
import tempfile
import threading
import uuid
from collections import Counter
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from litmus_score.importers import rows as r
from litmus_score.scoring.layout import IMPORT_MANIFEST_FILE, SHARD_KIND
from transforms import (
    NAMESPACE,
    coders,  # noqa: F401  (registers the Arrow element coders)
)
from transforms.files import to_json, write_text
from transforms.write import FileSet, WriteBundleFn, commit_files

FORMATS = ("inspect", "agentdojo", "otel", "scout")
TRAJECTORIES_DIR = "trajectories"
UNMAPPED_DIR = "unmapped"
UNMAPPED_TAG, REPORTS_TAG = "unmapped", "reports"
# Trajectories per emitted table: small enough that a file's rows never pile
# up in memory, large enough that Parquet row groups are not slivers.
CHUNK_ROWS = 512


def importer(log_format: str):
    """The format's module (litmus_score.importers.inspect, ...); ValueError for an unknown format."""
    if log_format not in FORMATS:
        raise ValueError(f"unknown log format {log_format!r}; expected one of {', '.join(FORMATS)}")
    return importlib.import_module(f"litmus_score.importers.{log_format}")


class NoMatchingLogs(ValueError):
    """A LOGS argument that matches no log file."""


class SkippedLog(OSError):
    """A matched path that is not opened (not_a_file says why)."""


def _match(pattern: str) -> list:
    try:
        return [m.path for m in FileSystems.match([pattern])[0].metadata_list]
    except BeamIOError:
        return []


def _is_local(path: str) -> bool:
    return FileSystems.get_scheme(path) is None


def _local_folder(folder: str, suffixes) -> list:
    """The paths under a local folder, at any depth, whose names end in one
    of `suffixes`, hidden names left out (as a glob leaves them). Linked
    folders are followed once each, so a link looping back ends there; a
    broken or looping link with a log's name is listed, for the import to
    name it."""
    found, seen = [], set()
    for top, folders, files in os.walk(folder, followlinks=True):
        seen.add(os.path.realpath(top))
        folders[:] = sorted(name for name in folders if not name.startswith(".")
                            and os.path.realpath(os.path.join(top, name)) not in seen)
        found += [os.path.join(top, name) for name in sorted(files)
                  if name.endswith(suffixes) and not name.startswith(".")]
    return found


def _local_logs(pattern: str, suffixes) -> list:
    """Every path a local pattern names, folders expanded, including the
    broken links and special files Beam's match skips or opens blindly."""
    if glob.has_magic(pattern):
        named = sorted(glob.glob(pattern, recursive="**" in pattern))
    else:
        named = [pattern] if os.path.lexists(pattern) else []
    return [log for path in named
            for log in (_local_folder(path, suffixes) if os.path.isdir(path) else [path])]


def _remote_logs(pattern: str, suffixes) -> list:
    matched = [] if pattern.endswith("/") else _match(pattern)
    if not matched:
        folder = pattern.rstrip("/")
        matched = [path for path in _match(FileSystems.join(folder, "**")) if path.endswith(suffixes)]
    return matched


def match_logs(patterns, suffixes) -> list:
    """The sorted, distinct files the patterns match. A folder stands for the
    files under it, at any depth, whose names end in one of `suffixes`.
    Local paths that are no regular file (a pipe, a broken or looping link)
    are kept: ImportLogFn names them and does not open them."""
    files = set()
    for pattern in patterns:
        matched = _local_logs(pattern, suffixes) if _is_local(pattern) else _remote_logs(pattern, suffixes)
        if not matched:
            raise NoMatchingLogs(f"no log file matches {pattern!r}")
        files.update(matched)
    return sorted(files)


def not_a_file(path: str) -> str | None:
    """Why a local path is not opened (None: it is a regular file, or not
    local): a pipe or device would hang or never end, a link may lead
    nowhere. Decided by stat alone, without opening it."""
    if not _is_local(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        kind = "a broken or looping link" if os.path.islink(path) else "cannot be read"
        return f"skipped: {kind} ({error.strerror or error})"
    if not stat.S_ISREG(mode):
        return "skipped: not a regular file (a pipe, socket or device); not opened"
    return None


@contextlib.contextmanager
def local_copy(path: str):
    """A local path for `path`: itself when local, else a temporary copy (the
    formats' libraries open paths, not Beam's file objects)."""
    if FileSystems.get_scheme(path) is None:
        yield path
        return
    suffix = os.path.splitext(path)[1]
    with tempfile.NamedTemporaryFile(suffix=suffix) as copy:
        with FileSystems.open(path, compression_type="uncompressed") as source:
            shutil.copyfileobj(source, copy, 1 << 20)
        copy.flush()
        yield copy.name


def _size(path: str) -> int | None:
    """A file's size in bytes without opening it; None where it is no regular file or cannot be had."""
    if not_a_file(path):
        return None
    if _is_local(path):
        return os.stat(path).st_size
    matched = FileSystems.match([path])[0].metadata_list
    return matched[0].size_in_bytes if len(matched) == 1 else None


def plan_parts(files, module, bytes_per_part: int | None) -> list:
    """The work items of `files`, (path, byte range or None for the whole file):
    a file the format splits (module.SPLITS) into ranges of `bytes_per_part`
    bytes, known from its size alone; every other file whole."""
    parts: list = []
    for path in files:
        size = _size(path) if bytes_per_part and path.endswith(getattr(module, "SPLITS", ())) else None
        if not bytes_per_part or not size:
            parts.append((path, None))
            continue
        # The last range runs to the end (None): whatever the file holds when it is read.
        parts += [(path, (start, start + bytes_per_part if start + bytes_per_part < size else None))
                  for start in range(0, size, bytes_per_part)]
    return parts


# The last plans this worker process made (a log's ranges reach a worker one
# by one; each would otherwise read the log's directory again), by path and size.
_PLANS: dict = {}
_PLANS_KEPT = 2
_PLANS_LOCK = threading.Lock()  # a runner's threads share the process


def _plan(module, path: str, handle):
    key = (path, handle.seek(0, 2))
    with _PLANS_LOCK:
        plan = _PLANS.get(key)
    if plan is None:
        plan = module.plan_log(handle)
        with _PLANS_LOCK:
            while len(_PLANS) >= _PLANS_KEPT:
                _PLANS.pop(next(iter(_PLANS)))
            _PLANS[key] = plan
    return plan


@contextlib.contextmanager
def _items(module, path: str, byte_range, principal: str, options: dict):
    """The items an importer reads from a work item: the whole file, or the units of a byte range."""
    if byte_range is None:
        with local_copy(path) as local:
            yield module.read_log(local, path, principal, **options)
    else:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            yield module.read_range(handle, path, _plan(module, path, handle), *byte_range, principal, **options)


class ImportLogFn(beam.DoFn):
    """A work item, (path, byte range or None) -> pa.Tables of trajectories;
    unmapped entries and one report per work item on the tagged outputs.
    Rows and entries are gathered over the bundle into tables of CHUNK_ROWS,
    so that thousands of small logs (an AgentDojo folder, one episode a file)
    do not become thousands of one-row tables."""

    def __init__(self, log_format: str, principal: str, options=None):
        self._format = log_format
        self._principal = principal
        self._options = dict(options or {})
        self._failed = Metrics.counter(NAMESPACE, "log_parts_failed")
        self._trajectories = Metrics.counter(NAMESPACE, "trajectories_imported")
        self._unmapped = Metrics.counter(NAMESPACE, "entries_unmapped")

    def setup(self):
        self._module = importer(self._format)
        self._schema = r.shard_schema(self._module.EXTRA_FIELDS)

    def start_bundle(self):
        self._rows: list = []
        self._misses: list = []

    def _full_tables(self):
        """The gathered rows, or entries, as a table once CHUNK_ROWS of them are waiting."""
        if len(self._rows) >= CHUNK_ROWS:
            yield pa.Table.from_pylist(self._rows, schema=self._schema)
            self._rows = []
        if len(self._misses) >= CHUNK_ROWS:
            yield beam.pvalue.TaggedOutput(UNMAPPED_TAG, pa.Table.from_pylist(self._misses, schema=r.UNMAPPED))
            self._misses = []

    def finish_bundle(self):
        if self._rows:
            yield GlobalWindows.windowed_value(pa.Table.from_pylist(self._rows, schema=self._schema))
        if self._misses:
            yield beam.pvalue.TaggedOutput(
                UNMAPPED_TAG, GlobalWindows.windowed_value(pa.Table.from_pylist(self._misses, schema=r.UNMAPPED)))

    def process(self, work: tuple):
        path, byte_range = work
        report = new_report(path)
        skipped = not_a_file(path)
        try:
            if skipped:
                raise SkippedLog(skipped)
            with _items(self._module, path, byte_range, self._principal, self._options) as items:
                for item in items:
                    if isinstance(item, r.FileSummary):
                        report["facts"].update(item.facts)
                        report["units_declared"] = item.units_declared
                    elif isinstance(item, r.Unmapped):
                        count_unmapped(report, item)
                        self._misses.append({"file": path, "position": item.position, "reason": item.reason,
                                       "detail": r.bounded(item.detail), "unit": item.unit, "call": item.call,
                                       "trajectory_id": item.trajectory_id})
                    else:
                        count_trajectory(report, item)
                        self._rows.append(item.row)
                    yield from self._full_tables()  # a log of millions of damaged units, too
        except Exception as error:
            # A foreign or damaged file makes a format's library raise
            # anything; the file fails alone and the report names the fault.
            # What it yielded before the fault stays imported and counted.
            logging.warning("cannot import %s: %s", path, error)
            self._failed.inc()
            report["error"] = r.bounded(str(error) if skipped else f"{type(error).__name__}: {error}")
            report["skipped"] = bool(skipped)
        self._trajectories.inc(report["trajectories"])
        self._unmapped.inc(report["unmapped"])
        report["unmapped_by_reason"] = dict(sorted(report["unmapped_by_reason"].items()))
        report["principal_attribute"] = {context: dict(sorted(used.items()))
                                         for context, used in report["principal_attribute"].items()}
        yield beam.pvalue.TaggedOutput(REPORTS_TAG, report)


def new_report(path: str) -> dict:
    """A file's report: what it held, what became of it, and its fault.

    units: trajectories plus unmapped units (units_declared: what the file
    lists, where it does). calls: the calls the trajectories hold;
    calls_unmapped: the calls the log shows that they lack (each counted in
    its trajectory's call_count, where it has one). not_imported: the units
    and calls no trajectory accounts for. skipped: the path was never opened
    (a pipe, a broken or looping link); its error says why.
    """
    return {"file": path, "units": 0, "units_declared": None, "trajectories": 0, "calls": 0, "calls_unmapped": 0,
            "unmapped": 0, "unmapped_by_reason": Counter(), "not_imported": {"units": 0, "calls": 0},
            "principal_source": {context: {r.FROM_LOG: 0, r.FROM_DEFAULT: 0} for context in (r.PROPOSAL, r.COMMIT)},
            "principal_attribute": {context: Counter() for context in (r.PROPOSAL, r.COMMIT)},
            "facts": {}, "error": None, "skipped": False}


def count_unmapped(report: dict, item: r.Unmapped) -> None:
    report["units"] += item.unit
    report["unmapped"] += 1
    report["unmapped_by_reason"][item.reason] += 1
    report["calls_unmapped"] += item.call
    report["not_imported"]["units"] += item.unit
    report["not_imported"]["calls"] += item.call and item.trajectory_id is None


def count_trajectory(report: dict, item: r.Trajectory) -> None:
    report["units"] += 1
    report["trajectories"] += 1
    report["calls"] += len(item.row["calls"])
    for context, sources in item.principal_sources().items():
        for source, n in sources.items():
            report["principal_source"][context][source] += n
    for context, used in item.principal_attributes.items():
        report["principal_attribute"][context].update(used)


def merge_reports(reports) -> dict:
    """One report of the reports of a file's parts (associative: Beam may merge
    partial merges). Counts add up; the facts and units_declared are the first
    part's (no other has them); the error is the least of the parts' errors,
    so that it does not depend on how the file was split."""
    reports = list(reports)
    merged = new_report(reports[0]["file"])
    for report in reports:
        for key in ("units", "trajectories", "calls", "calls_unmapped", "unmapped"):
            merged[key] += report[key]
        merged["unmapped_by_reason"].update(report["unmapped_by_reason"])
        for kind in ("units", "calls"):
            merged["not_imported"][kind] += report["not_imported"][kind]
        for context in (r.PROPOSAL, r.COMMIT):
            for source in (r.FROM_LOG, r.FROM_DEFAULT):
                merged["principal_source"][context][source] += report["principal_source"][context][source]
            merged["principal_attribute"][context].update(report["principal_attribute"][context])
        merged["facts"].update(report["facts"])
        if report["units_declared"] is not None:
            merged["units_declared"] = (merged["units_declared"] or 0) + report["units_declared"]
        merged["skipped"] = merged["skipped"] or report["skipped"]
    errors = [report["error"] for report in reports if report["error"]]
    merged["error"] = min(errors) if errors else None
    merged["unmapped_by_reason"] = dict(sorted(merged["unmapped_by_reason"].items()))
    merged["principal_attribute"] = {context: dict(sorted(used.items()))
                                     for context, used in merged["principal_attribute"].items()}
    return merged


class ImportLogs(beam.PTransform):
    """LOGS (files, folders, globs) of one format -> a dict of PCollections:
    trajectories (pa.Tables on `schema`), unmapped (pa.Tables on
    rows.UNMAPPED) and reports (one dict per file).

    Globs are matched when the transform is built, so a pattern that matches
    nothing fails before any work is launched. `principal` is the acting
    identity where the log names none; `harness_verdict` (Inspect logs) names
    the sample score kept as the harness's own verdict; `max_sample_mib`
    (Inspect logs) bounds one sample's decompressed record; `identity_attributes`
    (OTel, comma-separated) the ordered span attributes that name the acting identity;
    `bytes_per_part` the bytes one work item reads of a log the format splits
    (None: the format's default).
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
        # Known from the files' sizes, so that each work item is created on its own (a runner spreads those).
        self.parts = plan_parts(self.files, module, bytes_per_part or getattr(module, "BYTES_PER_PART", None))
        self.schema = r.shard_schema(module.EXTRA_FIELDS)

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, beam.PCollection]:
        imported = (
            pbegin
            | "Log parts" >> beam.Create(self.parts, reshuffle=False)
            # One part is one unit of work, spread over the workers: a big log's ranges too.
            | "Spread parts" >> beam.Reshuffle()
            | "Import part"
            >> beam.ParDo(ImportLogFn(self._format, self._principal, self._options))
            .with_output_types(pa.Table, **{UNMAPPED_TAG: pa.Table, REPORTS_TAG: dict})
            .with_outputs(UNMAPPED_TAG, REPORTS_TAG, main=TRAJECTORIES_DIR)
        )
        reports = (
            imported[REPORTS_TAG]
            | "Key reports by file" >> beam.Map(lambda report: (report["file"], report))
            | "Merge reports per file" >> beam.CombinePerKey(merge_reports)
            | "File reports" >> beam.Values()
        )
        return {TRAJECTORIES_DIR: imported[TRAJECTORIES_DIR], UNMAPPED_TAG: imported[UNMAPPED_TAG],
                REPORTS_TAG: reports}


def manifest_document(reports, header: dict, outputs=()) -> dict:
    """import-manifest.json: the header, every file's report and the totals."""
    files = sorted(reports, key=lambda report: report["file"])
    by_reason: Counter[str] = Counter()
    for report in files:
        by_reason.update(report["unmapped_by_reason"])
    totals = {key: sum(report[key] for report in files)
              for key in ("units", "trajectories", "calls", "calls_unmapped", "unmapped")}
    totals["not_imported"] = {
        kind: sum(report["not_imported"][kind] for report in files) for kind in ("units", "calls")}
    # Which calls took their principal from the log, which the default: proposals and commits apart.
    sources = {context: {source: sum(report["principal_source"][context][source] for report in files)
                         for source in (r.FROM_LOG, r.FROM_DEFAULT)} for context in (r.PROPOSAL, r.COMMIT)}
    principal = {**header.get("principal", {}), "source": sources}
    if "identity_attributes" in principal:
        # Which of the attributes tried named them, where the format reads several (OTel).
        principal["attribute"] = {
            context: dict(sorted(sum((Counter(report["principal_attribute"][context]) for report in files),
                                     Counter()).items())) for context in (r.PROPOSAL, r.COMMIT)}
    return {
        **header,
        "principal": principal,
        "files": files,
        "failed_files": [report["file"] for report in files if report["error"]],
        "totals": {"files": len(files), "files_skipped": sum(report["skipped"] for report in files), **totals,
                   "unmapped_by_reason": dict(sorted(by_reason.items()))},
        "outputs": sorted(outputs, key=lambda entry: entry["path"]),
    }


def incomplete(manifest: dict) -> bool:
    """Whether some input was not imported: a file that failed, or a unit or
    call that no trajectory accounts for (a lost call a trajectory does
    account for unscores it instead)."""
    return bool(manifest["failed_files"]) or any(manifest["totals"]["not_imported"].values())


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
