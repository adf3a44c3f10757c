"""`litmus-score import FORMAT LOGS... --output DIR`, and `score --input_format FORMAT`.

Exit codes as `score`'s (litmus_score.exits): 4 when some input was not
imported: a log file, or a unit or call of one that no trajectory accounts
for (import-manifest.json names it and its fault).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING

from litmus_score import text
from litmus_score.exits import Exit
from litmus_score.importers import FORMATS
from litmus_score.scoring.layout import IMPORT_MANIFEST_FILE, LOCK_FILE, TRAJECTORIES_DIR, UNMAPPED_DIR
from pipeline.options import UsageError, folder_name
from pipeline.publish import FolderKind

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

DEFAULT_PRINCIPAL = "agent"
# What an import writes into its folder; it finished when its manifest exists.
IMPORT = FolderKind("import", frozenset({IMPORT_MANIFEST_FILE, TRAJECTORIES_DIR, UNMAPPED_DIR, LOCK_FILE}),
                    IMPORT_MANIFEST_FILE)
# Exit codes of a scored run that 4 (a log not imported) takes precedence over.
VERDICTS = (Exit.OK, Exit.REGRESSION, Exit.WITHHELD)
_EXTRAS = {"inspect": "inspect", "agentdojo": "agentdojo", "otel": "otel", "scout": "scout"}


@dataclass(frozen=True, eq=False)
class ImportConfig:
    """An import job's validated options."""

    log_format: str
    logs: tuple
    output: str
    principal: str
    beam: PipelineOptions
    harness_verdict: str | None = None
    max_sample_mib: float | None = None
    identity_attributes: str | None = None


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def add_import_flags(parser) -> None:
    parser.add_argument("--principal", default=DEFAULT_PRINCIPAL,
                        help=f"acting identity where the log names none (default {DEFAULT_PRINCIPAL!r}); "
                             "the manifest counts which calls took it")
    parser.add_argument("--harness_verdict", "--harness-verdict", default=None, metavar="[not:]SCORER[.KEY]",
                        help="Inspect logs: the sample score that is the harness's own verdict of misuse (true: "
                             "misuse happened; not: true means safe), kept beside ours and compared in the report")
    parser.add_argument("--max_sample_mib", "--max-sample-mib", type=float, default=None, metavar="MIB",
                        help="Inspect logs: the bound on one sample's decompressed record (default "
                             "256); a larger sample is not read, and is counted unmapped (sample_too_large)")
    parser.add_argument("--identity_attributes", "--identity-attributes", default=None, metavar="NAME[,NAME...]",
                        help="OTel logs: the span attributes that name the acting identity, tried in order on the "
                             "span, then on its resource (default enduser.id,user.id,gen_ai.agent.identity.id); "
                             "list vendors' prefixed copies here")


def summary(manifest: dict, output: str) -> str:
    totals = manifest["totals"]
    lines = [f"litmus-score import {manifest['format']}: {totals['files']} file(s), {totals['units']} "
             f"{manifest['units']} -> {totals['trajectories']} trajectories with {totals['calls']} calls; "
             f"{totals['unmapped']} entries unmapped"]
    lines += [f"  unmapped {text.shown(reason)}: {n}" for reason, n in totals["unmapped_by_reason"].items()]
    if totals["calls_unmapped"]:
        lines.append(f"  {totals['calls_unmapped']} call(s) the logs show are not in their trajectory's calls: "
                     "counted in its call_count, so scoring leaves it unscored (call_count_mismatch)")
    lost = totals["not_imported"]
    if any(lost.values()):
        lines.append(f"  not imported: {lost['units']} {manifest['units']}, {lost['calls']} call(s) of no trajectory")
    principal = manifest["principal"]
    for context in ("proposal", "commit"):
        source = principal["source"][context]
        lines.append(f"  {context} principal: {source['log']} from the log, {source['default']} "
                     f"the default {text.shown(principal['default'])!r}")
    if totals["files_skipped"]:
        lines.append(f"  {totals['files_skipped']} path(s) skipped, never opened: named below")
    for report in manifest["files"]:
        if report["error"]:
            lines.append(f"error: {text.shown(report['file'])} not imported: {text.shown(report['error'])}")
    lines.append(f"outputs: {output}/ ({IMPORT_MANIFEST_FILE}, {TRAJECTORIES_DIR}/, unmapped/)")
    return "\n".join(lines)


def build_import(config: ImportConfig):
    """The import job's pipeline, its logs matched; UsageError when the
    format's library is missing or no log file matches."""
    import apache_beam as beam

    from litmus_score.importers import importer
    from pipeline.job import package_version
    from transforms import imports

    module = importer(config.log_format)
    library = _version(module.LIBRARY)
    if library is None:
        raise UsageError(f"importing {config.log_format} logs needs {module.LIBRARY}: "
                         f"pip install 'litmus-score[{_EXTRAS[config.log_format]}]'")
    try:
        logs_transform = imports.ImportLogs(config.log_format, config.logs, config.principal, config.harness_verdict,
                                      max_sample_mib=config.max_sample_mib,
                                      identity_attributes=config.identity_attributes)
    except ValueError as error:  # NoMatchingLogs, an empty principal, a harness verdict or attributes it cannot read
        raise UsageError(str(error)) from None
    header = {
        "schema": "litmus-import-manifest/1",
        "format": config.log_format,
        "units": module.UNITS,
        "importer": {"name": "litmus-score", "version": package_version(), "module": module.__name__},
        "library": {"name": module.LIBRARY, "version": library},
        "apache_beam": beam.__version__,
        "logs": list(config.logs),
        "principal": {"default": config.principal, **logs_transform.identity_header},
        "harness_verdict": config.harness_verdict,
        "max_sample_mib": logs_transform.max_sample_mib,
        # contract field <- log field; null: the source does not record it.
        "observes": module.OBSERVES,
    }
    pipeline = beam.Pipeline(options=config.beam)
    imported = pipeline | "Import logs" >> logs_transform
    imported | "Write import" >> imports.WriteImport(config.output, header, logs_transform.schema)
    return pipeline


def run_import(config: ImportConfig, pipeline) -> tuple:
    """Runs the import job into its claimed folder; (exit code, manifest). Failed if it did not finish."""
    from apache_beam.io.filesystems import FileSystems

    from litmus_score.importers.manifest import incomplete
    from pipeline import job

    job.execute(pipeline)
    with job.publishing(config.output):
        with FileSystems.open(FileSystems.join(config.output, IMPORT_MANIFEST_FILE)) as handle:
            manifest = json.loads(handle.read().decode("utf-8"))
    print(summary(manifest, config.output))
    return (Exit.INCOMPLETE_INPUT if incomplete(manifest) else Exit.OK), manifest


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def import_command(argv) -> Exit:
    from pipeline import job, publish
    from pipeline.flags import beam_options

    parser = argparse.ArgumentParser(prog="litmus-score import",
                                     description="Import agent logs into trajectory shards; other flags go to Beam.")
    parser.add_argument("format", choices=FORMATS)
    parser.add_argument("logs", nargs="+", help="log files, folders or globs (local, gs://, ...)")
    parser.add_argument("--output", required=True, help="folder for the shards: new or empty (or see --replace)")
    parser.add_argument("--replace", action="store_true",
                        help="replace an earlier import in --output, finished or not")
    add_import_flags(parser)
    args, beam_args = parser.parse_known_args(argv)
    try:
        config = ImportConfig(args.format, tuple(args.logs), folder_name(args.output), args.principal,
                              beam_options(beam_args), args.harness_verdict, args.max_sample_mib,
                              args.identity_attributes)
        pipeline = build_import(config)
        lock = publish.claim(config.output, args.replace, kind=IMPORT)
    except (UsageError, publish.PublishError) as error:
        text.error(error)
        return Exit.USAGE
    try:
        return run_import(config, pipeline)[0]
    except job.Failed as failed:
        text.error(f"{failed}; {config.output} was not imported")
        return Exit.FAILED
    finally:
        lock.release()


def import_and_score(argv) -> Exit:
    """`score --input_format FORMAT --input LOGS ...`: imports into
    OUTPUT/imported/, then scores those shards into OUTPUT with the rest of
    the flags, holding OUTPUT's lock throughout (with --replace, an earlier
    attempt is replaced whole, its imported/ too)."""
    from pipeline import job, publish

    parser = _Parser(prog="litmus-score score", add_help=False)
    parser.add_argument("--input_format", "--input-format", choices=FORMATS, required=True)
    parser.add_argument("--input", dest="inputs", action="append", required=True)
    parser.add_argument("--output", required=True)
    add_import_flags(parser)
    try:
        args, rest = parser.parse_known_args(argv)
        output = folder_name(args.output)
        config, baseline = job.configure(rest, inputs=[imported_shards(output)], output=output)
    except (UsageError, publish.PublishError) as error:
        text.error(error)
        return Exit.USAGE
    return import_then_score(args, config, baseline)


def imported_shards(output: str) -> str:
    """The glob of the shards `import_then_score` imports for a run into `output`."""
    from apache_beam.io.filesystems import FileSystems

    from litmus_score.scoring.layout import IMPORTED_DIR

    return FileSystems.join(output, IMPORTED_DIR, TRAJECTORIES_DIR, "*.parquet")


def import_then_score(args, config, baseline, night: dict | None = None) -> Exit:
    """Imports the logs `args` name (input_format, inputs and the import
    flags) into config.output's imported/, then scores them as `config`
    says (its inputs: imported_shards), holding the output's lock
    throughout; `night` as job.run's."""
    from apache_beam.io.filesystems import FileSystems

    from litmus_score.scoring.layout import IMPORTED_DIR
    from pipeline import job, publish
    from transforms.read import NoVerdictSource

    try:
        if config.policy is None and not config.accept_no_verdict:  # logs record no verdict: stop before importing
            raise NoVerdictSource(args.inputs)
        imported = FileSystems.join(config.output, IMPORTED_DIR)
        import_config = ImportConfig(args.input_format, tuple(args.inputs), imported, args.principal, config.beam,
                                     args.harness_verdict, args.max_sample_mib, args.identity_attributes)
        pipeline = build_import(import_config)
        lock = publish.claim(config.output, config.replace, night)
    except (UsageError, publish.PublishError, NoVerdictSource) as error:
        text.error(error)
        return Exit.USAGE
    try:
        code, _ = run_import(import_config, pipeline)
        print()
        scored = job.run(config, baseline, night, claimed=lock)
    except job.Failed as failed:
        text.error(f"{failed}; {config.output} was not published")
        return Exit.FAILED
    finally:
        lock.release()
    # A file that could not be imported is input that was not scored: 4 wins over 0, 3 and 5.
    return Exit.INCOMPLETE_INPUT if code == Exit.INCOMPLETE_INPUT and scored in VERDICTS else scored
