"""`litmus-score import FORMAT LOGS... --output DIR`, and `score --input-format FORMAT`.

Exit codes as `score`'s (litmus_score.exits): 4 when some log file could not
be imported (import-manifest.json names it and its fault).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Optional

from litmus_score.exits import Exit
from litmus_score.importers.pipeline import FORMATS, MANIFEST_FILE, TRAJECTORIES_DIR
from pipeline import text
from pipeline.options import UsageError, folder_name

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

DEFAULT_PRINCIPAL = "agent"
_EXTRAS = {"inspect": "inspect", "agentdojo": "agentdojo", "otel": "otel"}


@dataclass(frozen=True, eq=False)
class ImportConfig:
    """An import job's validated options."""

    log_format: str
    logs: tuple
    output: str
    principal: str
    beam: PipelineOptions


def _version(distribution: str) -> Optional[str]:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _add_import_flags(parser) -> None:
    parser.add_argument("--principal", default=DEFAULT_PRINCIPAL,
                        help=f"acting identity where the log names none (default {DEFAULT_PRINCIPAL!r}); "
                             "the manifest counts which calls took it")


def _holds_files(folder: str) -> bool:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(folder) and bool(FileSystems.match([FileSystems.join(folder, "*")])[0].metadata_list)


def _refuse_filled(output: str) -> None:
    if _holds_files(output):
        raise UsageError(f"output folder {output!r} is not empty; choose a new one")


def summary(manifest: dict, output: str) -> str:
    totals = manifest["totals"]
    lines = [f"litmus-score import {manifest['format']}: {totals['files']} file(s), {totals['units']} "
             f"{manifest['units']} -> {totals['trajectories']} trajectories with {totals['calls']} calls; "
             f"{totals['unmapped']} entries unmapped"]
    lines += [f"  unmapped {text.shown(reason)}: {n}" for reason, n in totals["unmapped_by_reason"].items()]
    principal = manifest["principal"]
    lines.append(f"  principal: {principal['source']['log']} call(s) from the log, {principal['source']['default']} "
                 f"the default {text.shown(principal['default'])!r}")
    for report in manifest["files"]:
        if report["error"]:
            lines.append(f"error: {text.shown(report['file'])} not imported: {text.shown(report['error'])}")
    lines.append(f"outputs: {output}/ ({MANIFEST_FILE}, {TRAJECTORIES_DIR}/, unmapped/)")
    return "\n".join(lines)


def run_import(config: ImportConfig) -> tuple:
    """Runs the import job; (exit code, manifest or None)."""
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems

    from litmus_score.importers import pipeline as p
    from pipeline.job import package_version

    module = p.importer(config.log_format)
    library = _version(module.LIBRARY)
    if library is None:
        text.error(f"importing {config.log_format} logs needs {module.LIBRARY}: "
                   f"pip install 'litmus-score[{_EXTRAS[config.log_format]}]'")
        return Exit.USAGE, None
    try:
        logs_transform = p.ImportLogs(config.log_format, config.logs, config.principal)
    except ValueError as error:  # NoMatchingLogs, an empty principal
        text.error(error)
        return Exit.USAGE, None
    header = {
        "schema": "litmus-import-manifest/1",
        "format": config.log_format,
        "units": module.UNITS,
        "importer": {"name": "litmus-score", "version": package_version(), "module": module.__name__},
        "library": {"name": module.LIBRARY, "version": library},
        "apache_beam": beam.__version__,
        "logs": list(config.logs),
        "principal": {"default": config.principal},
        # contract field <- log field; null: the source does not record it.
        "observes": module.OBSERVES,
    }
    pipeline = beam.Pipeline(options=config.beam)
    imported = pipeline | "Import logs" >> logs_transform
    imported | "Write import" >> p.WriteImport(config.output, header, logs_transform.schema)
    state = pipeline.run().wait_until_finish()
    if state != beam.runners.runner.PipelineState.DONE:
        text.error(f"the import pipeline ended in state {state}")
        return Exit.FAILED, None
    with FileSystems.open(FileSystems.join(config.output, MANIFEST_FILE)) as handle:
        manifest = json.loads(handle.read().decode("utf-8"))
    print(summary(manifest, config.output))
    return (Exit.INCOMPLETE_INPUT if manifest["failed_files"] else Exit.OK), manifest


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def import_command(argv) -> Exit:
    from pipeline.flags import beam_options

    parser = argparse.ArgumentParser(prog="litmus-score import",
                                     description="Import agent logs into trajectory shards; other flags go to Beam.")
    parser.add_argument("format", choices=FORMATS)
    parser.add_argument("logs", nargs="+", help="log files, folders or globs (local, gs://, ...)")
    parser.add_argument("--output", required=True, help="folder for the shards; must be new or empty")
    _add_import_flags(parser)
    args, beam_args = parser.parse_known_args(argv)
    try:
        config = ImportConfig(args.format, tuple(args.logs), folder_name(args.output), args.principal,
                              beam_options(beam_args))
        _refuse_filled(config.output)
    except UsageError as error:
        text.error(error)
        return Exit.USAGE
    return run_import(config)[0]


def import_and_score(argv) -> Exit:
    """`score --input-format FORMAT --input LOGS ...`: imports into
    OUTPUT/imported/, then scores those shards into OUTPUT with the rest of
    the flags."""
    from apache_beam.io.filesystems import FileSystems

    from litmus_score.scoring.layout import IMPORTED_DIR
    from pipeline import job
    from pipeline.publish import PublishError

    parser = _Parser(prog="litmus-score score", add_help=False)
    parser.add_argument("--input-format", choices=FORMATS, required=True)
    parser.add_argument("--input", dest="inputs", action="append", required=True)
    parser.add_argument("--output", required=True)
    _add_import_flags(parser)
    try:
        args, rest = parser.parse_known_args(argv)
        output = folder_name(args.output)
        imported = FileSystems.join(output, IMPORTED_DIR)
        config, baseline = job.configure(rest, inputs=[FileSystems.join(imported, TRAJECTORIES_DIR, "*.parquet")],
                                         output=output)
        _refuse_filled(output)
    except (UsageError, PublishError) as error:
        text.error(error)
        return Exit.USAGE
    code, manifest = run_import(ImportConfig(args.input_format, tuple(args.inputs), imported, args.principal,
                                             config.beam))
    if manifest is None:
        return code
    print()
    scored = job.run(config, baseline)
    # A file that could not be imported is input that was not scored: 4 wins over 0 and 3.
    return Exit.INCOMPLETE_INPUT if code == Exit.INCOMPLETE_INPUT and scored in (Exit.OK, Exit.REGRESSION) else scored
