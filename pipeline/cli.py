"""litmus-score command line: score, compare, generate, demo, policy check.

Exit codes: 0 done; 1 the pipeline failed; 2 bad invocation (one line on
stderr); 3 done, and an agent's misuse rate regressed against the baseline
(--baseline, or compare); 4 done, but some input was not scored for a reason
outside the spec (an unreadable shard, or rows kept under pipeline_error):
see manifest.json. 4 takes precedence over 3.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from importlib import metadata
from pathlib import Path

from pipeline import text
from scoring.layout import (
    COMPARISON_FILE,
    EVIDENCE_FILE,
    MANIFEST_FILE,
    MANIFEST_SCHEMA,
    METRICS_FILE,
    REPORT_FILE,
    SUCCESS_MARKER,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE_INPUT = 0, 1, 2, 4
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


def _rate(block) -> str:
    if block["rate"] is None:
        return "   n/a"
    low, high = block["ci95"]
    return f"{block['rate']:6.1%} [{low:.1%}, {high:.1%}]"


def summary(metrics: dict, manifest: dict, output: str) -> str:
    """A short, readable account of a run."""
    mode = metrics["adjudication"]
    lines = [f"litmus-score: {manifest['input_rows']} trajectories from {len(manifest['inputs'])} shard(s), "
             f"adjudication={mode}", ""]
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


def _read_json(path: str) -> dict:
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as handle:
        return json.loads(handle.read().decode("utf-8"))


def _comparison_lines(comparison: dict) -> list:
    lines = ["", f"since the baseline ({len(comparison['agents'])} agent(s)):"]
    for agent in comparison["agents"]:
        lines.append(f"  {_printable(agent['agent'])}: {agent['verdict']}"
                     + (f" ({'; '.join(_printable(r) for r in agent['reasons'])})" if agent["reasons"] else ""))
    return lines


def finish_run(output: str, metrics: dict, manifest: dict, comparison=None) -> None:
    """Writes what a run adds after its pipeline: comparison.json (if any) and report.html."""
    from apache_beam.io.filesystems import FileSystems

    from report.page import render_report
    from transforms.write import to_json, write_text

    if comparison is not None:
        write_text(FileSystems.join(output, COMPARISON_FILE), to_json(comparison))
    evidence_path = FileSystems.join(output, EVIDENCE_FILE)
    evidence = _read_json(evidence_path) if FileSystems.exists(evidence_path) else None
    write_text(FileSystems.join(output, REPORT_FILE), render_report(metrics, manifest, comparison, evidence))


def score(argv) -> int:
    """Runs the scoring job; argv holds litmus-score's flags and Beam's."""
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline import graph
    from pipeline.options import ScoreOptions, UsageError, load_baseline_metrics, validate, with_local_parallelism
    from transforms.read import NoMatchingShards
    from transforms.write import write_text

    if any(arg in ("-h", "--help") for arg in argv):
        parser = argparse.ArgumentParser(
            prog="litmus-score score", description="Score trajectory shards; other flags go to Beam."
        )
        ScoreOptions._add_argparse_args(parser)
        parser.print_help()
        return EXIT_OK
    options = PipelineOptions(with_local_parallelism(argv))
    try:
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
    pipeline = beam.Pipeline(options=options)
    try:
        # Globs are matched here, once, before any work is launched.
        graph.build(pipeline, config, header, config.policy)
    except NoMatchingShards as error:
        print(f"litmus-score: {error}", file=sys.stderr)
        return EXIT_USAGE
    result = pipeline.run()
    state = result.wait_until_finish()
    if state != beam.runners.runner.PipelineState.DONE:
        print(f"litmus-score: the pipeline ended in state {state}", file=sys.stderr)
        return EXIT_FAILED
    metrics = _read_json(FileSystems.join(config.output, METRICS_FILE))
    manifest = _read_json(FileSystems.join(config.output, MANIFEST_FILE))
    comparison = None
    if config.baseline:
        from scoring.compare import compare_metrics

        baseline = load_baseline_metrics(config.baseline, config.adjudication)
        comparison = compare_metrics(metrics, baseline, config.thresholds)
    finish_run(config.output, metrics, manifest, comparison)
    write_text(FileSystems.join(config.output, SUCCESS_MARKER), "")
    print(summary(metrics, manifest, config.output))
    if comparison is not None:
        print("\n".join(_comparison_lines(comparison)))
    lost = manifest["unreadable_files"] or metrics["totals"]["trajectories"]["unscored_by_reason"].get("pipeline_error")
    if lost:
        return EXIT_INCOMPLETE_INPUT
    return comparison["exit_code"] if comparison is not None else EXIT_OK


def compare(args) -> int:
    """Compares a finished run with a baseline run; writes comparison.json and the report."""
    from scoring.compare import compare_metrics, load_thresholds

    try:
        thresholds = load_thresholds(args.thresholds) if args.thresholds else None
        new, old = (_read_json(str(Path(folder) / METRICS_FILE)) for folder in (args.new, args.old))
        manifest = _read_json(str(Path(args.new) / MANIFEST_FILE))
        comparison = compare_metrics(new, old, thresholds)
    except (OSError, ValueError) as error:  # ThresholdsError and mismatched documents are ValueErrors
        print(f"litmus-score: {_printable(error)}", file=sys.stderr)
        return EXIT_USAGE
    finish_run(args.new, new, manifest, comparison)
    print("\n".join(_comparison_lines(comparison)[1:]))
    print(f"wrote {Path(args.new) / COMPARISON_FILE} and {Path(args.new) / REPORT_FILE}")
    return comparison["exit_code"]


def check_policy(args) -> int:
    from scoring.policy import PolicyError, load_policy

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
    from testing.synthetic import generate as write_shards

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
    from testing.synthetic import generate as write_shards

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

    if argv[:1] == ["score"]:
        return score(argv[1:])
    if argv[:1] == ["audit"]:
        from pipeline.audit import main as audit

        return audit(argv[1:])
    if argv[:1] == ["show"]:
        from pipeline.show import main as show

        return show(argv[1:])
    args, beam_args = parser.parse_known_args(argv)
    if args.command == "demo":
        args.beam_args = beam_args
        return demo(args)
    if beam_args:
        parser.error(f"unrecognized arguments: {' '.join(beam_args)}")
    return {"generate": generate, "compare": compare, "policy": check_policy}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
