"""`litmus-score import FORMAT LOGS... --output DIR`, and `score --input-format FORMAT`.

Exit codes as `score`'s: 0 done; 1 the pipeline failed; 2 bad invocation;
4 done, but some input was not imported: a log file, or a unit or call of
one that no trajectory accounts for (import-manifest.json names it and its
fault).
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata

from litmus_score.importers.pipeline import FORMATS, MANIFEST_FILE, TRAJECTORIES_DIR

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE_INPUT = 0, 1, 2, 4
DEFAULT_PRINCIPAL = "agent"
_EXTRAS = {"inspect": "inspect", "agentdojo": "agentdojo", "otel": "otel"}


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _add_import_flags(parser) -> None:
    parser.add_argument("--principal", default=DEFAULT_PRINCIPAL,
                        help=f"acting identity where the log names none (default {DEFAULT_PRINCIPAL!r}); "
                             "the manifest counts which calls took it")
    parser.add_argument("--harness-verdict", default=None, metavar="[not:]SCORER[.KEY]",
                        help="Inspect logs: the sample score that is the harness's own verdict of misuse (true: "
                             "misuse happened; not: true means safe), kept beside ours and compared in the report")


def _holds_files(folder: str) -> bool:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(folder) and bool(FileSystems.match([FileSystems.join(folder, "*")])[0].metadata_list)


def _summary(manifest: dict, output: str) -> str:
    from pipeline.cli import _printable

    totals = manifest["totals"]
    lines = [f"litmus-score import {manifest['format']}: {totals['files']} file(s), {totals['units']} "
             f"{manifest['units']} -> {totals['trajectories']} trajectories with {totals['calls']} calls; "
             f"{totals['unmapped']} entries unmapped"]
    lines += [f"  unmapped {_printable(reason)}: {n}" for reason, n in totals["unmapped_by_reason"].items()]
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
                     f"the default {_printable(principal['default'])!r}")
    for report in manifest["files"]:
        if report["error"]:
            lines.append(f"error: {_printable(report['file'])} not imported: {_printable(report['error'])}")
    lines.append(f"outputs: {output}/ ({MANIFEST_FILE}, {TRAJECTORIES_DIR}/, unmapped/)")
    return "\n".join(lines)


def run_import(log_format: str, logs, output: str, principal: str, beam_args, harness_verdict=None) -> tuple:
    """Runs the import job; (exit code, manifest or None)."""
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from litmus_score.importers import pipeline as p
    from pipeline.cli import _package_version
    from pipeline.options import with_local_parallelism

    output = output.rstrip("/") or "/"
    if _holds_files(output):
        print(f"litmus-score: output folder {output!r} is not empty; choose a new one", file=sys.stderr)
        return EXIT_USAGE, None
    module = p.importer(log_format)
    library = _version(module.LIBRARY)
    if library is None:
        print(f"litmus-score: importing {log_format} logs needs {module.LIBRARY}: "
              f"pip install 'litmus-score[{_EXTRAS[log_format]}]'", file=sys.stderr)
        return EXIT_USAGE, None
    try:
        logs_transform = p.ImportLogs(log_format, logs, principal, harness_verdict)
    except ValueError as error:  # NoMatchingLogs, an empty principal, a harness verdict it cannot read
        print(f"litmus-score: {error}", file=sys.stderr)
        return EXIT_USAGE, None
    header = {
        "schema": "litmus-import-manifest/1",
        "format": log_format,
        "units": module.UNITS,
        "importer": {"name": "litmus-score", "version": _package_version(), "module": module.__name__},
        "library": {"name": module.LIBRARY, "version": library},
        "apache_beam": beam.__version__,
        "logs": list(logs),
        "principal": {"default": principal},
        "harness_verdict": harness_verdict,
        # contract field <- log field; null: the source does not record it.
        "observes": module.OBSERVES,
    }
    pipeline = beam.Pipeline(options=PipelineOptions(with_local_parallelism(list(beam_args))))
    imported = pipeline | "Import logs" >> logs_transform
    imported | "Write import" >> p.WriteImport(output, header, logs_transform.schema)
    state = pipeline.run().wait_until_finish()
    if state != beam.runners.runner.PipelineState.DONE:
        print(f"litmus-score: the import pipeline ended in state {state}", file=sys.stderr)
        return EXIT_FAILED, None
    with FileSystems.open(FileSystems.join(output, MANIFEST_FILE)) as handle:
        manifest = json.loads(handle.read().decode("utf-8"))
    print(_summary(manifest, output))
    return (EXIT_INCOMPLETE_INPUT if p.incomplete(manifest) else EXIT_OK), manifest


def import_command(argv) -> int:
    parser = argparse.ArgumentParser(prog="litmus-score import",
                                     description="Import agent logs into trajectory shards; other flags go to Beam.")
    parser.add_argument("format", choices=FORMATS)
    parser.add_argument("logs", nargs="+", help="log files, folders or globs (local, gs://, ...)")
    parser.add_argument("--output", required=True, help="folder for the shards; must be new or empty")
    _add_import_flags(parser)
    args, beam_args = parser.parse_known_args(argv)
    return run_import(args.format, args.logs, args.output, args.principal, beam_args, args.harness_verdict)[0]


def import_and_score(argv, score) -> int:
    """`score --input-format FORMAT --input LOGS ...`: imports into
    OUTPUT/imported/, then scores those shards into OUTPUT with the rest of
    the flags. `score` is pipeline.cli.score."""
    from apache_beam.io.filesystems import FileSystems

    from litmus_score.scoring.layout import IMPORTED_DIR

    parser = argparse.ArgumentParser(prog="litmus-score score", add_help=False)
    parser.add_argument("--input-format", choices=FORMATS, required=True)
    parser.add_argument("--input", dest="inputs", action="append", required=True)
    parser.add_argument("--output", required=True)
    _add_import_flags(parser)
    args, rest = parser.parse_known_args(argv)
    # Logs record no verdict: without a policy (or the flag accepting that), stop before importing.
    verdicts = argparse.ArgumentParser(add_help=False)
    verdicts.add_argument("--policy")
    verdicts.add_argument("--accept_no_verdict", action="store_true")
    given, _ = verdicts.parse_known_args(rest)
    if not (given.policy or given.accept_no_verdict):
        from transforms.read import NoVerdictSource

        print(f"litmus-score: {NoVerdictSource(args.inputs)}", file=sys.stderr)
        return EXIT_USAGE
    output = args.output.rstrip("/") or "/"
    if _holds_files(output):
        print(f"litmus-score: output folder {output!r} is not empty; choose a new one", file=sys.stderr)
        return EXIT_USAGE
    imported = FileSystems.join(output, IMPORTED_DIR)
    code, manifest = run_import(args.input_format, args.inputs, imported, args.principal, rest, args.harness_verdict)
    if manifest is None:
        return code
    print()
    scored = score([*rest, "--input", FileSystems.join(imported, TRAJECTORIES_DIR, "*.parquet"), "--output", output])
    # A file that could not be imported is input that was not scored: 4 wins over 0 and 3.
    return EXIT_INCOMPLETE_INPUT if code == EXIT_INCOMPLETE_INPUT and scored in (EXIT_OK, 3) else scored
