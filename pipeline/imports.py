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
from litmus_score.importers.manifest import summary_lines
from litmus_score.scoring.layout import IMPORT_MANIFEST_FILE, LOCK_FILE, TRAJECTORIES_DIR, UNMAPPED_DIR
from pipeline.options import UsageError, folder_name
from pipeline.publish import FolderKind

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

DEFAULT_PRINCIPAL = "agent"
# What an import writes into its folder; it finished when its manifest exists.
IMPORT = FolderKind("import", frozenset({IMPORT_MANIFEST_FILE, TRAJECTORIES_DIR, UNMAPPED_DIR, LOCK_FILE}),
                    IMPORT_MANIFEST_FILE)
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
    return "\n".join([*summary_lines(manifest),
                      f"outputs: {output}/ ({IMPORT_MANIFEST_FILE}, {TRAJECTORIES_DIR}/, {UNMAPPED_DIR}/)"])


def import_logs(config: ImportConfig, transform=None, **options) -> tuple:
    """(the ImportLogs transform of `config`'s logs, its manifest's header);
    `transform` another class of it (transforms.imports.ImportToScore) with
    its `options`. UsageError when the format's library is missing or no
    log file matches."""
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
        logs_transform = (transform or imports.ImportLogs)(
            config.log_format, config.logs, config.principal, config.harness_verdict,
            max_sample_mib=config.max_sample_mib, identity_attributes=config.identity_attributes, **options)
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
    return logs_transform, header


def build_import(config: ImportConfig):
    """The import job's pipeline, its logs matched; UsageError as import_logs'."""
    import apache_beam as beam

    from transforms import imports

    logs_transform, header = import_logs(config)
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


def plan(argv) -> tuple:
    """(the import flags, the RunConfig, the pinned baseline or None) of
    `score --input_format FORMAT --input LOGS ...`; UsageError, PublishError."""
    from pipeline import job

    parser = _Parser(prog="litmus-score score", add_help=False)
    parser.add_argument("--input_format", "--input-format", choices=FORMATS, required=True)
    parser.add_argument("--input", dest="inputs", action="append", required=True)
    parser.add_argument("--output", required=True)
    add_import_flags(parser)
    args, rest = parser.parse_known_args(argv)
    config, baseline = job.configure(rest, inputs=args.inputs, output=folder_name(args.output))
    return args, config, baseline


def import_and_score(argv) -> Exit:
    """`score --input_format FORMAT --input LOGS ...`: imports the logs and
    scores them into OUTPUT in one job (score_logs), with the rest of the flags."""
    from pipeline import publish

    try:
        args, config, baseline = plan(argv)
    except (UsageError, publish.PublishError) as error:
        text.error(error)
        return Exit.USAGE
    return score_logs(args, config, baseline)


def log_import(args, config):
    """The import half (pipeline.graph.LogImport) of a job that scores the logs
    `args` name (input_format, inputs and the import flags) as `config` says;
    UsageError as import_logs'."""
    from pipeline.graph import LogImport
    from transforms.imports import ImportToScore

    import_config = ImportConfig(args.input_format, tuple(args.inputs), config.output, args.principal, config.beam,
                                 args.harness_verdict, args.max_sample_mib, args.identity_attributes)
    return LogImport(*import_logs(import_config, ImportToScore, max_text_bytes=config.bounds.max_text_bytes))


def score_logs(args, config, baseline, night: dict | None = None, submit: bool = False) -> Exit:
    """Imports the logs `args` name and scores their trajectories as `config`
    says, in one job: no file between the two, the import's manifest part of
    the run's (`import`), its unmapped entries the run's unmapped/. A log
    not imported whole is input not scored: exit 4 wins over 0, 3 and 5.
    `night` as job.run's; `submit`: submitted, the job publishing itself
    (job.submit), for a launcher that must not wait."""
    from pipeline import job

    try:
        logs = log_import(args, config)
    except UsageError as error:
        text.error(error)
        return Exit.USAGE
    return (job.submit if submit else job.run)(config, baseline, night, logs=logs)
