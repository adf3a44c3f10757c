"""litmus-score command line: score, nightly, trend, import, compare, generate, demo, policy check.

Exit codes: 0 done; 1 the pipeline failed; 2 bad invocation (one line on
stderr); 3 done, and an agent's misuse rate regressed against the baseline
(--baseline, or compare); 4 done, but some input was not scored for a reason
outside the spec (an unreadable shard, or rows kept under pipeline_error):
see manifest.json. 4 takes precedence over 3.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
from importlib import metadata
from pathlib import Path

from pipeline import text
from litmus_score.scoring.layout import COMPARISON_FILE, EVIDENCE_FILE, MANIFEST_SCHEMA, OTHER, REPORT_FILE

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE_INPUT = 0, 1, 2, 4
ERROR_CHARS = 1000
DEMO_MARKER = ".litmus-demo"
DEMO_OUTPUT = "litmus-demo"


def _package_version() -> str:
    try:
        return metadata.version("litmus-score")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _printable(value) -> str:
    """Text from trajectories, safe for a terminal: control characters escaped, length bounded."""
    return "-" if value is None else text.display(value, text.TERMINAL_CHARS)


def _error_line(error) -> str:
    """An error's one line: paths in it are kept whole, control characters escaped."""
    return text.display(error, ERROR_CHARS)


def _rate(block) -> str:
    if block["rate"] is None:
        return "   n/a"
    low, high = block["ci95"]
    return f"{block['rate']:6.1%} [{low:.1%}, {high:.1%}]"


def summary(metrics: dict, manifest: dict, output: str) -> str:
    """A short, readable account of a run."""
    mode = metrics["adjudication"]
    trajectories, inputs = metrics["totals"]["trajectories"], metrics["inputs"]
    lines = [f"litmus-score: {trajectories['input']} trajectories from {len(manifest['inputs'])} shard(s), "
             f"adjudication={mode}"]
    if trajectories["duplicates_dropped"]:
        lines.append(f"{trajectories['duplicates_dropped']} duplicate(s) dropped: identical copies of a "
                     "(run_id, trajectory_id) counted once")
    other = next((g for g in metrics["groups"] if g["run_id"] == g["agent"] == OTHER), None)
    if other is not None:
        lines.append(f"more (run_id, agent) groups than --max_groups: {len(metrics['groups']) - 1} kept, "
                     f"the rest ({other['trajectories']['input']} trajectories) summed under run_id and agent {OTHER}")
    if inputs["rows_read"] < inputs["rows_declared"]:
        lines.append(f"{inputs['rows_declared'] - inputs['rows_read']} row(s) that files declare could not be read")
    lines.append("")
    lines.append(f"{'run':<22} {'agent':<16} {'misuse (95% CI)':<24} {'legacy proposal-time':<24} "
                 f"{'over':>5} {'under':>5}  unscored")
    for group in metrics["groups"] + [dict(metrics["totals"], run_id="TOTAL", agent="")]:
        unscored = ", ".join(f"{reason} {n}" for reason, n in group["trajectories"]["unscored_by_reason"].items() if n)
        lines.append(
            f"{_printable(group['run_id'])[:22]:<22} {_printable(group['agent'])[:16]:<16} "
            f"{_rate(group['misuse']):<24} {_rate(group['legacy_misuse']):<24} "
            f"{group['over_penalized']:>5} {group['under_penalized']:>5}  "
            f"{group['trajectories']['unscored']}{' (' + unscored + ')' if unscored else ''}"
        )
    for report in manifest["inputs"]:
        for issue in report["issues"]:
            lines.append(f"warning: {_printable(report['file'])}: {_printable(issue)}")
        if report["error"]:
            lines.append(f"error: {_printable(report['file'])} unreadable: {_printable(report['error'])}")
    lines += ["", f"outputs: {output}/ (report.html, metrics.json, manifest.json, evidence.json, "
              "scored/, trajectories/, unscored/)"]
    return "\n".join(lines)


def _comparison_lines(comparison: dict) -> list:
    lines = ["", f"since the baseline ({len(comparison['agents'])} agent(s)):"]
    for agent in comparison["agents"]:
        lines.append(f"  {_printable(agent['agent'])}: {agent['verdict']}"
                     + (f" ({'; '.join(_printable(r) for r in agent['reasons'])})" if agent["reasons"] else ""))
    return lines


def finish_run(output: str, metrics: dict, manifest: dict, comparison=None) -> dict:
    """Completes a run: comparison.json (if any) and report.html, then the
    manifest listing them and _SUCCESS (pipeline.publish). Returns the manifest."""
    import json

    from apache_beam.io.filesystems import FileSystems

    from pipeline.publish import publish
    from litmus_score.report.page import render_report
    from transforms.write import to_json

    documents = {}
    if comparison is not None:
        documents[COMPARISON_FILE] = to_json(comparison)
    evidence = None
    if any(entry["path"] == EVIDENCE_FILE for entry in manifest["outputs"]):
        with FileSystems.open(FileSystems.join(output, EVIDENCE_FILE)) as handle:
            evidence = json.loads(handle.read().decode("utf-8"))
    documents[REPORT_FILE] = render_report(metrics, manifest, comparison, evidence)
    return publish(output, manifest, documents)


def score(argv, night=None) -> int:
    """Runs the scoring job; argv holds litmus-score's flags and Beam's.
    `night` ({date, inputs}, from `nightly`) goes into the manifest and lets
    the run replace that night's own earlier attempt."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline import graph, publish
    from pipeline.flags import check_flags
    from pipeline.progress import ProgressLine, runs_in_process
    from pipeline.options import (ScoreOptions, UsageError, load_baseline_metrics, validate, with_local_parallelism,
                                  with_our_runners)
    from transforms.read import NoMatchingShards, NoVerdictSource

    if any(arg.split("=")[0] == "--input-format" for arg in argv):
        from litmus_score.importers.cli import import_and_score

        return import_and_score(argv, score)
    if any(arg in ("-h", "--help") for arg in argv):
        parser = argparse.ArgumentParser(
            prog="litmus-score score", description="Score trajectory shards; other flags go to Beam."
        )
        ScoreOptions._add_argparse_args(parser)
        parser.print_help()
        return EXIT_OK
    argv = with_our_runners(argv)
    try:
        check_flags(argv)
        options = PipelineOptions(with_local_parallelism(argv))
        config = validate(options)
    except UsageError as error:
        print(f"litmus-score: {error}", file=sys.stderr)
        return EXIT_USAGE
    header = {
        "schema": MANIFEST_SCHEMA,
        "package": {"name": "litmus-score", "version": _package_version(), "apache_beam": beam.__version__},
        "options": config.as_dict(),
        "policy_sha256": config.policy.sha256 if config.policy is not None else None,
    }
    if night is not None:
        header["night"] = night
    pipeline = beam.Pipeline(options=options)
    try:
        # Globs are matched here, once, before any work is launched or the output is touched.
        shard_count = graph.build(pipeline, config, header, config.policy)
        lock = publish.claim(config.output, config.replace, night)
    except (NoMatchingShards, NoVerdictSource, publish.PublishError) as error:
        print(f"litmus-score: {_error_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with ProgressLine(shard_count) if runs_in_process(options) else contextlib.nullcontext():
            state = pipeline.run().wait_until_finish()
        if state != beam.runners.runner.PipelineState.DONE:
            print(f"litmus-score: the pipeline ended in state {state}", file=sys.stderr)
            return EXIT_FAILED
        metrics, manifest = publish.read_run(config.output, complete=False)
        comparison = None
        if config.baseline:
            from litmus_score.scoring.compare import baseline_source, compare_metrics

            baseline = load_baseline_metrics(config.baseline, config.adjudication)
            source = baseline_source(config.baseline, publish.read_run(config.baseline)[1])
            comparison = compare_metrics(metrics, baseline, config.thresholds, source)
        manifest = finish_run(config.output, metrics, manifest, comparison)
    except (UsageError, publish.PublishError) as error:  # the baseline or the run's own files changed under it
        print(f"litmus-score: {_error_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        lock.release()
    print(summary(metrics, manifest, config.output))
    if comparison is not None:
        print("\n".join(_comparison_lines(comparison)))
    lost = manifest["unreadable_files"] or metrics["totals"]["trajectories"]["unscored_by_reason"].get("pipeline_error")
    if lost:
        return EXIT_INCOMPLETE_INPUT
    return comparison["exit_code"] if comparison is not None else EXIT_OK


def nightly(argv) -> int:
    """Scores one night into OUTPUT_ROOT/date=DATE/ against the latest earlier complete night."""
    from pipeline.nightly import plan
    from pipeline.options import UsageError

    try:
        planned = plan(argv)
    except UsageError as error:
        print(f"litmus-score: {_error_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    if planned is None:  # --help
        return EXIT_OK
    score_argv, night, baseline, root = planned
    print(f"litmus-score nightly {night['date']}: baseline "
          + (_printable(baseline) if baseline else "none (no earlier complete night in this mode)"))
    code = score(score_argv, night)
    from litmus_score.scoring.compare import EXIT_REGRESSION

    if code in (EXIT_OK, EXIT_REGRESSION, EXIT_INCOMPLETE_INPUT):  # the night is published: the trend has it
        from litmus_score.report.trend import refresh

        refresh(root)
    return code


def compare(args) -> int:
    """Compares a finished run with a baseline run; writes comparison.json and the report."""
    from apache_beam.io.filesystems import FileSystems

    from pipeline.publish import Lock, read_run
    from litmus_score.scoring.compare import baseline_source, compare_metrics, load_thresholds

    try:
        thresholds = load_thresholds(args.thresholds) if args.thresholds else None
        read_run(args.new)  # a clear refusal before the lock is taken
        lock = Lock.acquire(args.new)
    except (OSError, ValueError) as error:  # ThresholdsError and PublishError are ValueErrors
        print(f"litmus-score: {_error_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        (new, manifest), (old, old_manifest) = read_run(args.new), read_run(args.old)
        comparison = compare_metrics(new, old, thresholds, baseline_source(args.old, old_manifest))
        finish_run(args.new, new, manifest, comparison)
    except (OSError, ValueError) as error:  # mismatched documents are ValueErrors
        print(f"litmus-score: {_error_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        lock.release()
    print("\n".join(_comparison_lines(comparison)[1:]))
    print(f"wrote {FileSystems.join(args.new, COMPARISON_FILE)} and {FileSystems.join(args.new, REPORT_FILE)}")
    return comparison["exit_code"]


def check_policy(args) -> int:
    from litmus_score.scoring.policy import PolicyError, load_policy

    try:
        policy = load_policy(args.file)
    except OSError as error:
        print(f"litmus-score: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except PolicyError as error:
        print(f"litmus-score: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{args.file}: valid, sha256 {policy.sha256}")
    return EXIT_OK


def generate(args) -> int:
    from litmus_score.synthetic import generate as write_shards

    try:
        factors = {}
        for planted in args.plant_misuse:
            agent, _, factor = planted.partition("=")
            factors[agent] = float(factor)
        paths = write_shards(args.output, args.trajectories, args.shards, args.seed, args.profile, factors)
    except (ValueError, FileExistsError) as error:
        print(f"litmus-score: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {len(paths)} shard(s) to {args.output}")
    return EXIT_OK


def demo(args) -> int:
    """Generate the reference-1200 data, score it, print the summary."""
    from litmus_score.synthetic import generate as write_shards

    folder = Path(args.output)
    if folder.exists() and any(folder.iterdir()):
        if not (folder / DEMO_MARKER).exists():
            print(f"litmus-score: {folder} exists and is not a demo folder; choose another --output", file=sys.stderr)
            return EXIT_USAGE
        shutil.rmtree(folder)  # an earlier demo's own folder
    folder.mkdir(parents=True)
    (folder / DEMO_MARKER).write_text("made by `litmus-score demo`; safe to delete\n")
    shards = folder / "shards"
    write_shards(str(shards), shards=4, seed=args.seed, profile="reference-1200")
    return score(["--input", str(shards / "*.parquet"), "--output", str(folder / "out"), *args.beam_args])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="litmus-score", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("score", help="score shards (flags: litmus-score score --help)", add_help=False)
    commands.add_parser("audit", help="per tool: does proposal-time scoring hold? (litmus-score audit --help)",
                        add_help=False)
    commands.add_parser("show", help="one trajectory of a run, call by call (litmus-score show --help)",
                        add_help=False)

    gen = commands.add_parser("generate", help="write synthetic shards that follow the contract")
    gen.add_argument("--output", required=True)
    gen.add_argument("--trajectories", type=int, default=None, help="default 1000 (reference-1200: 1200)")
    gen.add_argument("--shards", type=int, default=4)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--profile", default="mixed", help="mixed or reference-1200")
    gen.add_argument("--plant-misuse", action="append", default=[], metavar="AGENT=FACTOR",
                     help="multiply an agent's propensity for misuse (plants a regression); repeatable")

    dem = commands.add_parser("demo", help="generate the reference-1200 data, score it, summarize")
    dem.add_argument("--output", default=DEMO_OUTPUT, help=f"demo folder (default ./{DEMO_OUTPUT})")
    dem.add_argument("--seed", type=int, default=0)

    cmp = commands.add_parser("compare", help="compare a run with a baseline run (exit 3 on a regression)")
    cmp.add_argument("new", help="output folder of the newer run")
    cmp.add_argument("old", help="output folder of the baseline run")
    cmp.add_argument("--thresholds", help="regression thresholds YAML (default: configs/thresholds.yaml's values)")

    pol = commands.add_parser("policy", help="policy files")
    pol_commands = pol.add_subparsers(dest="policy_command", required=True)
    pol_commands.add_parser("check", help="validate a policy file and print its hash").add_argument("file")

    commands.add_parser("nightly", help="score one night under a root, against the last complete night "
                                          "(flags: litmus-score nightly --help)", add_help=False)
    commands.add_parser("import", help="import agent logs into shards (litmus-score import FORMAT --help)",
                        add_help=False)
    commands.add_parser("trend", help="the history of nights under an output root: trend.json, trend.html "
                                        "(litmus-score trend --help)", add_help=False)

    if argv[:1] == ["score"]:
        return score(argv[1:])
    if argv[:1] == ["nightly"]:
        return nightly(argv[1:])
    if argv[:1] == ["import"]:
        from litmus_score.importers.cli import import_command

        return import_command(argv[1:])
    if argv[:1] == ["audit"]:
        from pipeline.audit import main as audit

        return audit(argv[1:])
    if argv[:1] == ["show"]:
        from pipeline.show import main as show

        return show(argv[1:])
    if argv[:1] == ["trend"]:
        from litmus_score.report.trend import main as trend

        return trend(argv[1:])
    args, beam_args = parser.parse_known_args(argv)
    if args.command == "demo":
        args.beam_args = beam_args
        return demo(args)
    if beam_args:
        parser.error(f"unrecognized arguments: {' '.join(beam_args)}")
    return {"generate": generate, "compare": compare, "policy": check_policy}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
