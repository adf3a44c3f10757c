"""litmus-score audit INPUTS... [--policy FILE]: for which tools proposal-time scoring holds.

Runs the same scoring as `score` (its validity block is the same in every
mode) without writing a run folder, and prints the table of
litmus_score.scoring.validity.audit_rows: a maintainer's answer before adopting the scorer.
"""

from __future__ import annotations

import argparse
import json
import tempfile

from litmus_score.exits import Exit
from pipeline import text
from litmus_score.scoring.validity import audit_rows

HEADER = ("tool", "calls", "unfaithful", "no verdict", "verdict diff", "args diff", "principal diff",
          "not realized", "faithful share (95% CI)", "over", "under", "proposal-time scoring")


def _share(row) -> str:
    low, high = row["ci95"]
    return f"{row['faithful_share']:6.1%} [{low:.1%}, {high:.1%}]"


def audit_table(block: dict, tool_chars: int = 24) -> str:
    """The validity block as an aligned, terminal-safe table."""
    rows = audit_rows(block)
    if not rows:
        return "no call could be audited: none of a complete trajectory with a commit and JSON-object arguments"
    lines = [
        f"{HEADER[0]:<{tool_chars}} {HEADER[1]:>7} {HEADER[2]:>10} {HEADER[3]:>10} {HEADER[4]:>12} {HEADER[5]:>9} "
        f"{HEADER[6]:>14} {HEADER[7]:>12}  {HEADER[8]:<24} {HEADER[9]:>5} {HEADER[10]:>5}  {HEADER[11]}"
    ]
    for row in rows:
        lines.append(
            f"{text.display(row['tool'], tool_chars):<{tool_chars}} {row['calls']:>7} {row['unfaithful']:>10} "
            f"{row['no_verdict']:>10} {row['verdict_diverged']:>12} {row['arguments_diverged']:>9} "
            f"{row['principal_diverged']:>14} {row['not_realized']:>12}  {_share(row):<24} "
            f"{row['over_flagged']:>5} {row['under_flagged']:>5}  "
            f"{'valid on every observed call' if row['valid'] else 'not valid'}"
        )
    valid = sum(row["valid"] for row in rows)
    lines += ["", f"{valid} of {len(rows)} tool(s) held on every observed call; a call counts under every "
                  "divergence that applies (docs/outputs.md: the validity audit)."]
    return "\n".join(lines)


def main(argv) -> Exit:
    parser = argparse.ArgumentParser(prog="litmus-score audit", description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", help="Parquet shard paths or globs (local, gs://, ...)")
    parser.add_argument("--policy", default=None, help="policy YAML: decides where a context recorded no verdict")
    args, beam_args = parser.parse_known_args(argv)

    import apache_beam as beam

    from pipeline.flags import beam_options
    from pipeline.graph import ScoreTrajectories
    from pipeline.options import UsageError, load_policy_file
    from litmus_score.scoring import contract as c
    from transforms.files import to_json, write_text
    from transforms.read import NoMatchingShards

    try:
        policy = load_policy_file(args.policy) if args.policy else None
        options = beam_options(beam_args)
    except UsageError as error:
        text.error(error)
        return Exit.USAGE
    with tempfile.TemporaryDirectory(prefix="litmus-audit-") as folder:
        path = f"{folder}/metrics.json"
        pipeline = beam.Pipeline(options=options)
        try:
            outputs = pipeline | "Score trajectories" >> ScoreTrajectories(args.inputs, c.COMMIT, policy=policy)
        except NoMatchingShards as error:
            text.error(error)
            return Exit.USAGE
        outputs["metrics"] | "Keep metrics" >> beam.Map(lambda doc: write_text(path, to_json(doc)))
        if pipeline.run().wait_until_finish() != beam.runners.runner.PipelineState.DONE:
            text.error("the pipeline failed")
            return Exit.FAILED
        with open(path, encoding="utf-8") as handle:
            metrics = json.load(handle)
    print(audit_table(metrics["totals"]["validity"]))
    return Exit.OK
