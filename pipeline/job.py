"""The scoring job as a function: a RunConfig in, a published run and an exit code out.

Every command that scores (`score`, `nightly`, `demo`, `score
--input-format`, the Dataflow template) builds one RunConfig
(pipeline.options) and calls run(), which matches the globs, claims the
output folder, runs the pipeline, compares with the baseline read when the
run started, and publishes the run (pipeline.publish).
"""

from __future__ import annotations

import contextlib
import json
from importlib import metadata
from typing import Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from litmus_score.exits import Exit, of_run
from litmus_score.scoring.layout import COMPARISON_FILE, EVIDENCE_FILE, MANIFEST_SCHEMA, REPORT_FILE
from pipeline import graph, publish, text
from pipeline.flags import beam_options
from pipeline.options import RunConfig, validate
from pipeline.progress import ProgressLine, runs_in_process
from transforms.files import to_json
from transforms.read import NoMatchingShards


def package_version() -> str:
    try:
        return metadata.version("litmus-score")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


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
    if inputs["rows_read"] < inputs["rows_declared"]:
        lines.append(f"{inputs['rows_declared'] - inputs['rows_read']} row(s) that files declare could not be read")
    lines.append("")
    lines.append(f"{'run':<22} {'agent':<16} {'misuse (95% CI)':<24} {'legacy proposal-time':<24} "
                 f"{'over':>5} {'under':>5}  unscored")
    for group in metrics["groups"] + [dict(metrics["totals"], run_id="TOTAL", agent="")]:
        unscored = ", ".join(f"{reason} {n}" for reason, n in group["trajectories"]["unscored_by_reason"].items() if n)
        lines.append(
            f"{text.shown(group['run_id'])[:22]:<22} {text.shown(group['agent'])[:16]:<16} "
            f"{_rate(group['misuse']):<24} {_rate(group['legacy_misuse']):<24} "
            f"{group['over_penalized']:>5} {group['under_penalized']:>5}  "
            f"{group['trajectories']['unscored']}{' (' + unscored + ')' if unscored else ''}"
        )
    for report in manifest["inputs"]:
        for issue in report["issues"]:
            lines.append(f"warning: {text.shown(report['file'])}: {text.shown(issue)}")
        if report["error"]:
            lines.append(f"error: {text.shown(report['file'])} unreadable: {text.shown(report['error'])}")
    lines += ["", f"outputs: {output}/ (report.html, metrics.json, manifest.json, evidence.json, "
              "scored/, trajectories/, unscored/)"]
    return "\n".join(lines)


def comparison_lines(comparison: dict) -> list:
    """The verdict per agent, or why it is withheld, for the terminal."""
    if comparison["withheld"]:
        return ["since the baseline: no verdict, the runs were scored under different rules "
                "(docs/nightly.md, comparing like with like):",
                *(f"  {text.display(line, text.ERROR_CHARS)}" for line in comparison["withheld"])]
    lines = [f"since the baseline ({len(comparison['agents'])} agent(s)):"]
    for agent in comparison["agents"]:
        lines.append(f"  {text.shown(agent['agent'])}: {agent['verdict']}"
                     + (f" ({'; '.join(text.shown(r) for r in agent['reasons'])})" if agent["reasons"] else ""))
    return lines


def finish_run(output: str, metrics: dict, manifest: dict, comparison=None) -> dict:
    """Completes a run: comparison.json (if any) and report.html, then the
    manifest listing them and _SUCCESS (pipeline.publish). Returns the manifest."""
    from litmus_score.report.page import render_report

    documents = {}
    if comparison is not None:
        documents[COMPARISON_FILE] = to_json(comparison)
    evidence = None
    if any(entry["path"] == EVIDENCE_FILE for entry in manifest["outputs"]):
        with FileSystems.open(FileSystems.join(output, EVIDENCE_FILE)) as handle:
            evidence = json.loads(handle.read().decode("utf-8"))
    documents[REPORT_FILE] = render_report(metrics, manifest, comparison, evidence)
    return publish.publish(output, manifest, documents)


def manifest_header(config: RunConfig, night: Optional[dict]) -> dict:
    """What the manifest records before the job's own accounting: options, versions, the policy, the night."""
    header = {
        "schema": MANIFEST_SCHEMA,
        "package": {"name": "litmus-score", "version": package_version(), "apache_beam": beam.__version__},
        "options": config.as_dict(),
        "policy_sha256": config.policy_sha256,
    }
    if night is not None:
        header["night"] = night
    return header


def configure(argv, **values) -> tuple:
    """(RunConfig, the pinned baseline or None) for `score`'s flags in `argv`
    and the values a command sets itself (pipeline.flags.beam_options);
    UsageError or PublishError (a baseline that is no complete run)."""
    config = validate(beam_options(argv, **values))
    return config, publish.pin_baseline(config.baseline) if config.baseline else None


def compare_with(baseline: publish.Baseline, metrics: dict, thresholds=None) -> dict:
    """comparison.json: `metrics` against the pinned baseline, which it names."""
    from litmus_score.scoring.compare import compare_metrics

    return {**compare_metrics(metrics, baseline.metrics, thresholds), "baseline": baseline.identity()}


def run(config: RunConfig, baseline: Optional[publish.Baseline] = None, night: Optional[dict] = None) -> Exit:
    """Scores, publishes and summarizes one run; returns its exit code.

    `baseline` is the run config.baseline names, read by the caller before
    anything else (publish.pin_baseline); `night` ({date, inputs}, from
    `nightly`) goes into the manifest and lets the run replace that night's
    own earlier attempt."""
    pipeline = beam.Pipeline(options=config.beam)
    try:
        # Globs are matched here, once, before any work is launched or the output is touched.
        shard_count = graph.build(pipeline, config, manifest_header(config, night))
        lock = publish.claim(config.output, config.replace, night)
    except (NoMatchingShards, publish.PublishError) as error:
        text.error(error)
        return Exit.USAGE
    try:
        with ProgressLine(shard_count) if runs_in_process(config.beam) else contextlib.nullcontext():
            state = pipeline.run().wait_until_finish()
        if state != beam.runners.runner.PipelineState.DONE:
            text.error(f"the pipeline ended in state {state}")
            return Exit.FAILED
        metrics, manifest = publish.read_run(config.output, complete=False)
        comparison = compare_with(baseline, metrics, config.thresholds) if baseline is not None else None
        manifest = finish_run(config.output, metrics, manifest, comparison)
    except publish.PublishError as error:  # the run's own files changed under it
        text.error(error)
        return Exit.USAGE
    finally:
        lock.release()
    print(summary(metrics, manifest, config.output))
    if comparison is not None:
        print("\n".join(["", *comparison_lines(comparison)]))
    lost = manifest["unreadable_files"] or metrics["totals"]["trajectories"]["unscored_by_reason"].get("pipeline_error")
    return of_run(bool(lost), comparison["exit_code"] if comparison is not None else Exit.OK)
