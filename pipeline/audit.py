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


def audit_table(block: dict) -> str:
    """The validity block as an aligned, terminal-safe table."""
    rows = audit_rows(block)
    if not rows:
        return "no call could be audited: none of a complete trajectory with a commit and JSON-object arguments"
    cells = [[text.shown(row["tool"]), *(str(row[key]) for key in (
                 "calls", "unfaithful", "no_verdict", "verdict_diverged", "arguments_diverged",
                 "principal_diverged", "not_realized")),
              _share(row), str(row["over_flagged"]), str(row["under_flagged"]),
              "valid on every observed call" if row["valid"] else "not valid", _changed(row),
              OUTCOMES.get(row["verdict"], "n/a")]
             for row in rows]
    lines = text.table(HEADER, cells, right={1, 2, 3, 4, 5, 6, 7, 9, 10})
    valid = sum(row["valid"] for row in rows)
    held = [text.shown(row["tool"]) for row in rows if row["verdict"] == HELD]
    lines += ["", f"{valid} of {len(rows)} tool(s) held on every observed call; a call counts under every "
                  "divergence that applies (docs/outputs.md: the validity audit).",
              f"The verdict held at commit (at most {VERDICT_TOLERANCE:.0%} of calls changed, 95% upper bound) for "
              f"{len(held)} of {len(rows)}{': ' + ', '.join(held) if held else ''}."]
    return "\n".join(lines)


def rules_table(flagged_by_rule: dict) -> str:
    """The misuse calls per what decided them, most first, as an aligned, terminal-safe
    table; "" without any misuse call."""
    if not flagged_by_rule:
        return ""
    ranked = sorted(flagged_by_rule.items(), key=lambda item: (-item[1], item[0]))
    return "\n".join(text.table(("misuse calls decided by", "calls"),
                                [[text.shown(rule), str(calls)] for rule, calls in ranked], right={1}))


HARNESS_HEADER = ("run", "agent", "harness verdict", "trajectories", "harness misuse", "vs commit-time",
                  "harness only", "ours only", "vs proposal-time", "harness only", "ours only")


def harness_table(groups) -> str:
    """Per group and harness verdict, agreement with commit-time and proposal-time
    misuse, as an aligned, terminal-safe table; "" when no input keeps a harness verdict."""
    rows = [(group, name, block) for group in groups
            for name, block in sorted((group.get("harness_agreement") or {}).items())]
    if not rows:
        return ""

    def agreement(cell) -> str:
        rate = cell["agreement"]["rate"]
        return f"{rate:6.1%}" if rate is not None else "   n/a"

    cells = []
    for group, name, block in rows:
        row = [text.shown(group["run_id"]), text.shown(group["agent"]), text.shown(name),
               str(block["trajectories"]), str(block["harness_misuse"]["count"])]
        for ours in ("misuse", "legacy_misuse"):
            row += [agreement(block[ours]), str(block[ours]["harness_only"]), str(block[ours]["ours_only"])]
        cells.append(row)
    return "\n".join(["", "The harness's own verdict beside ours (scored trajectories; harness only: it says misuse, "
                          "we do not):", *text.table(HARNESS_HEADER, cells, right=set(range(3, 11)))])


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
    from pipeline.graph import ScoreTrajectories, check_verdict_source, input_bytes
    from pipeline.options import UsageError, fit_local_workers, load_policy_file
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
        fit_local_workers(options, input_bytes(score.inputs.identities()))
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
