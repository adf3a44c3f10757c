"""litmus-score audit INPUTS... [--policy FILE]: for which tools proposal-time scoring holds.

Runs the same scoring as `score` (its validity block is the same in every
mode) without writing a run folder, and prints the table of
litmus_score.scoring.validity.audit_rows: a maintainer's answer before adopting the scorer.
Where some call is misuse, a table counts the misuse calls per rule that
decided them (metrics.json's flagged_by_rule). Where the inputs keep the
harness's own verdict (an imported AgentDojo `security`, an Inspect sample's
score), a last table shows, per run and agent, how it agrees with
commit-time and with proposal-time misuse.
"""

from __future__ import annotations

import argparse
import json
import tempfile

from litmus_score import text
from litmus_score.exits import Exit
from litmus_score.scoring.validity import CHANGED, HELD, TOO_FEW_CALLS, VERDICT_TOLERANCE, audit_rows

HEADER = ("tool", "calls", "unfaithful", "no verdict", "verdict diff", "args diff", "principal diff",
          "not realized", "faithful share (95% CI)", "over", "under", "proposal-time scoring",
          "verdict changed (95% upper)", "verdict at commit")
OUTCOMES = {HELD: "held", CHANGED: "changed", TOO_FEW_CALLS: "too few calls"}


def _share(row) -> str:
    low, high = row["ci95"]
    return f"{row['faithful_share']:6.1%} [{low:.1%}, {high:.1%}]"


def _changed(row) -> str:
    if row["verdict"] is None:
        return "n/a"
    return f"{row['verdict_changed']} ({row['verdict_changed_share']:.2%}, <= {row['verdict_changed_upper']:.2%})"


def audit_table(block: dict, tool_chars: int = 24) -> str:
    """The validity block as an aligned, terminal-safe table."""
    rows = audit_rows(block)
    if not rows:
        return "no call could be audited: none of a complete trajectory with a commit and JSON-object arguments"
    lines = [
        f"{HEADER[0]:<{tool_chars}} {HEADER[1]:>7} {HEADER[2]:>10} {HEADER[3]:>10} {HEADER[4]:>12} {HEADER[5]:>9} "
        f"{HEADER[6]:>14} {HEADER[7]:>12}  {HEADER[8]:<24} {HEADER[9]:>5} {HEADER[10]:>5}  {HEADER[11]:<28}  "
        f"{HEADER[12]:<28} {HEADER[13]}"
    ]
    for row in rows:
        lines.append(
            f"{text.display(row['tool'], tool_chars):<{tool_chars}} {row['calls']:>7} {row['unfaithful']:>10} "
            f"{row['no_verdict']:>10} {row['verdict_diverged']:>12} {row['arguments_diverged']:>9} "
            f"{row['principal_diverged']:>14} {row['not_realized']:>12}  {_share(row):<24} "
            f"{row['over_flagged']:>5} {row['under_flagged']:>5}  "
            f"{'valid on every observed call' if row['valid'] else 'not valid':<28}  "
            f"{_changed(row):<28} {OUTCOMES.get(row['verdict'], 'n/a')}"
        )
    valid = sum(row["valid"] for row in rows)
    held = [text.display(row["tool"], tool_chars) for row in rows if row["verdict"] == HELD]
    lines += ["", f"{valid} of {len(rows)} tool(s) held on every observed call; a call counts under every "
                  "divergence that applies (docs/outputs.md: the validity audit).",
              f"The verdict held at commit (at most {VERDICT_TOLERANCE:.0%} of calls changed, 95% upper bound) for "
              f"{len(held)} of {len(rows)}{': ' + ', '.join(held) if held else ''}."]
    return "\n".join(lines)


def rules_table(flagged_by_rule: dict, chars: int = 40) -> str:
    """The misuse calls per what decided them, most first, as an aligned, terminal-safe
    table; "" without any misuse call."""
    if not flagged_by_rule:
        return ""
    lines = [f"{'misuse calls decided by':<{chars}} {'calls':>7}"]
    for rule, calls in sorted(flagged_by_rule.items(), key=lambda item: (-item[1], item[0])):
        lines.append(f"{text.display(rule, chars):<{chars}} {calls:>7}")
    return "\n".join(lines)


HARNESS_HEADER = ("run", "agent", "harness verdict", "trajectories", "harness misuse", "vs commit-time",
                  "harness only", "ours only", "vs proposal-time", "harness only", "ours only")


def harness_table(groups, chars: int = 20) -> str:
    """Per group and harness verdict, agreement with commit-time and proposal-time
    misuse, as an aligned, terminal-safe table; "" when no input keeps a harness verdict."""
    rows = [(group, name, block) for group in groups
            for name, block in sorted((group.get("harness_agreement") or {}).items())]
    if not rows:
        return ""

    def agreement(cell) -> str:
        rate = cell["agreement"]["rate"]
        return f"{rate:6.1%}" if rate is not None else "   n/a"

    widths = (chars, chars, chars, 12, 14, 14, 12, 9, 16, 12, 9)
    lines = [" ".join(f"{h:<{w}}" if i < 3 else f"{h:>{w}}" for i, (h, w) in enumerate(zip(HARNESS_HEADER, widths)))]
    for group, name, block in rows:
        cells = [text.display(group["run_id"], chars), text.display(group["agent"], chars), text.display(name, chars),
                 block["trajectories"], block["harness_misuse"]["count"]]
        for ours in ("misuse", "legacy_misuse"):
            cells += [agreement(block[ours]), block[ours]["harness_only"], block[ours]["ours_only"]]
        lines.append(" ".join(f"{c:<{w}}" if i < 3 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cells, widths))))
    return "\n".join(["", "The harness's own verdict beside ours (scored trajectories; harness only: it says misuse, "
                             "we do not):", *lines])


def main(argv) -> Exit:
    parser = argparse.ArgumentParser(prog="litmus-score audit", description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", help="Parquet shard paths or globs (local, gs://, ...)")
    parser.add_argument("--policy", default=None, help="policy YAML: decides where a context recorded no verdict")
    parser.add_argument("--accept_no_verdict", action="store_true",
                        help="audit shards that record no verdict (agent logs) without a policy: every call no_verdict")
    args, beam_args = parser.parse_known_args(argv)

    import apache_beam as beam

    from litmus_score.scoring import contract as c
    from pipeline.flags import beam_options
    from pipeline.graph import ScoreTrajectories, check_verdict_source
    from pipeline.options import UsageError, load_policy_file
    from transforms.files import to_json, write_text
    from transforms.read import NoMatchingShards, NoVerdictSource

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
            score = ScoreTrajectories(args.inputs, c.COMMIT, policy=policy)
            check_verdict_source(score.shards, policy, args.accept_no_verdict)
            outputs = pipeline | "Score trajectories" >> score
        except (NoMatchingShards, NoVerdictSource) as error:
            text.error(error)
            return Exit.USAGE
        outputs["metrics"] | "Keep metrics" >> beam.Map(lambda doc: write_text(path, to_json(doc)))
        if pipeline.run().wait_until_finish() != beam.runners.runner.PipelineState.DONE:
            text.error("the pipeline failed")
            return Exit.FAILED
        with open(path, encoding="utf-8") as handle:
            metrics = json.load(handle)
    print(audit_table(metrics["totals"]["validity"]))
    rules = rules_table(metrics["totals"]["flagged_by_rule"])
    if rules:
        print(f"\n{rules}")
    harness = harness_table(metrics["groups"])
    if harness:
        print(harness)
    return Exit.OK
