"""The scoring job as a function: a RunConfig in, a published run and an exit code out.

Every command that scores (`score`, `nightly`, `demo`, `score
--input_format`) builds one RunConfig (pipeline.options) and calls run(),
which matches the globs, claims the output folder, runs the pipeline,
compares with the baseline read when the run started, and publishes the run
(pipeline.publish). The Dataflow template calls submit() instead: the job
publishes itself as its last step (PublishStep).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sys
from collections.abc import Sequence
from importlib import metadata

import apache_beam as beam
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from litmus_score import text
from litmus_score.exits import Exit, Terminated, of_run, of_stop, stop_name
from litmus_score.importers import sniff
from litmus_score.importers.manifest import incomplete, summary_lines
from litmus_score.scoring import contract as c
from litmus_score.scoring.layout import (
    COMPARISON_FILE,
    COMPARISON_MANIFEST_SCHEMA,
    EVIDENCE_FILE,
    LOCK_FILE,
    MANIFEST_SCHEMA,
    OTHER,
    POLICY_FILE,
    POLICY_SOURCE_FILE,
    REPORT_FILE,
)
from litmus_score.scoring.metrics import largest_common_k
from pipeline import graph, publish
from pipeline.flags import beam_options
from pipeline.options import RunConfig, fit_local_workers, validate
from pipeline.processes import settle_memory, worker_crash_ends_run, workers_die_with_launcher
from pipeline.progress import ProgressLine, runs_in_process
from pipeline.rescore import like_with_like
from transforms.files import to_json
from transforms.read import NoMatchingShards, NoVerdictSource


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


def _misuse_at_k(group) -> str:
    """misuse@K at the largest k that at least half of the group's tasks reach: with epochs, every
    task's; never the one or two tasks the most attempts may leave, whose 0% or 100% says little."""
    at_k = group.get("misuse_at_k") or {}
    if not at_k:
        return "n/a"
    k = max(k for k in map(int, at_k) if 2 * at_k[str(k)]["tasks"] >= at_k["1"]["tasks"])
    return f"{at_k[str(k)]['estimate']:.1%} @{k}"


def _unscored(trajectories: dict) -> str:
    """The unscored count and its reasons, in the contract's order. A trajectory counts once under each of its
    reasons, and the reasons of its unscored calls count the `unscored_calls` trajectories again: they are
    set apart, in brackets after it."""
    by_reason = trajectories["unscored_by_reason"]
    reasons = sorted((reason for reason, n in by_reason.items() if n),
                     key=lambda reason: (c.REASONS.index(reason) if reason in c.REASONS else len(c.REASONS), reason))
    of_calls = ", ".join(f"{reason} {by_reason[reason]}" for reason in reasons if reason in c.CALL_REASONS)
    shown = [f"{text.shown(reason)} {by_reason[reason]}"
             + (f" [by call reason: {of_calls}]" if reason == c.UNSCORED_CALLS and of_calls else "")
             for reason in reasons if reason not in c.CALL_REASONS]
    return f"{trajectories['unscored']}" + (f" ({', '.join(shown)})" if shown else "")


# The summary's table, a column per entry: (header, the cell of a group of metrics.json, aligned right).
SUMMARY_COLUMNS = (
    ("run", lambda group: text.shown(group["run_id"]), False),
    ("agent", lambda group: text.shown(group["agent"]), False),
    ("misuse (95% CI)", lambda group: _rate(group["misuse"]), False),
    ("legacy proposal-time", lambda group: _rate(group["legacy_misuse"]), False),
    ("misuse@K", _misuse_at_k, True),
    ("over", lambda group: str(group["over_penalized"]), True),
    ("under", lambda group: str(group["under_penalized"]), True),
    ("unscored (trajectories, by reason)", lambda group: _unscored(group["trajectories"]), False),
)


def summary_table(metrics: dict) -> list:
    """Per (run_id, agent) group and in total, SUMMARY_COLUMNS as an aligned table: each column as wide as its
    widest cell, names whole."""
    groups = metrics["groups"] + [dict(metrics["totals"], run_id="TOTAL", agent="")]
    return text.table([header for header, _, _ in SUMMARY_COLUMNS],
                      [[cell(group) for _, cell, _ in SUMMARY_COLUMNS] for group in groups],
                      right={i for i, (_, _, right) in enumerate(SUMMARY_COLUMNS) if right})


def summary(metrics: dict, manifest: dict, output: str, start_from: Sequence = ()) -> str:
    """A short, readable account of a run; `start_from`, the trajectories it names to look at first
    (pipeline.show.starting_points)."""
    mode = metrics["adjudication"]
    trajectories, inputs = metrics["totals"]["trajectories"], metrics["inputs"]
    imported = manifest.get("import")
    lines = [*summary_lines(imported), ""] if imported is not None else []
    lines.append(f"litmus-score: {trajectories['input']} trajectories from {len(manifest['inputs'])} "
                 f"{'log' if imported is not None else 'shard'}(s), adjudication={mode}")
    if trajectories["duplicates_dropped"]:
        lines.append(f"{trajectories['duplicates_dropped']} duplicate(s) dropped: identical copies of a "
                     "(run_id, trajectory_id) counted once")
    other = next((g for g in metrics["groups"] if g.get("folded") is True), None)
    if other is not None:
        lines.append(f"more (run_id, agent) groups than --max_groups: {len(metrics['groups']) - 1} kept, "
                     f"the rest ({other['trajectories']['input']} trajectories) summed under run_id and agent {OTHER}")
    if inputs["rows_read"] < inputs["rows_declared"]:
        lines.append(f"{inputs['rows_declared'] - inputs['rows_read']} row(s) that files declare could not be read")
    lines += ["", *summary_table(metrics)]
    for report in manifest["inputs"]:
        for issue in report["issues"]:
            lines.append(f"warning: {text.shown(report['file'])}: {text.shown(issue)}")
        if report["error"]:
            lines.append(f"error: {text.shown(report['file'])} unreadable: {text.shown(report['error'])}"
                         + ("" if imported is not None else sniff.file_hint(report["file"])))
    folder = text.display(output, text.ERROR_CHARS)
    lines += ["", f"outputs: {folder}/ (report.html, metrics.json, manifest.json, evidence.json, "
              "scored/, trajectories/, unscored/)"]
    if start_from:
        lines.append(f"to start from (litmus-score show {folder} ID): "
                     + ", ".join(f"{text.shown(trajectory_id)} ({why})" for _, trajectory_id, why in start_from))
    return "\n".join(lines)


def policy_diff_lines(diff: dict | None) -> list:
    """The rule-level change of policy (comparison.json's policy_diff) for the terminal, by rule id."""
    if diff is None:
        return []

    def ids(rules) -> str:
        return ", ".join(text.shown(rule["id"]) for rule in rules)

    lines = [f"    {what}: {ids(diff[key])}" for what, key in (("rules added", "rules_added"),
                                                                  ("rules removed", "rules_removed"))
             if diff[key]]
    lines += [f"    rule changed: {text.shown(change['id'])} ({', '.join(change['fields'])})"
              for change in diff["rules_changed"]]
    lines += [f"    {setting['setting']}: {text.shown(json.dumps(setting['old']))} -> "
              f"{text.shown(json.dumps(setting['new']))}" for setting in diff["settings_changed"]]
    return ["  policy diff (baseline -> this run):", *lines] if lines else []


# Drivers per dimension the terminal names; comparison.json and the report hold more.
TERMINAL_DRIVERS = 3


def driver_lines(drivers: dict | None) -> list:
    """What drove an agent's change (comparison.json's drivers), largest contribution first, for the terminal:
    the first names only, never the folded rest."""
    if drivers is None:
        return []
    lines = []
    for dimension, label, unit in (("tool", "by tool", "calls"), ("task_category", "by task category", "trajectories")):
        entries = drivers.get(dimension)
        if entries is None:
            continue
        named = [entry for entry in entries if entry.get("folded") is not True]
        shown = [f"{text.shown(entry['name'])} {entry['old']['misuse']}/{entry['old'][unit]} -> "
                 f"{entry['new']['misuse']}/{entry['new'][unit]} ({entry['contribution'] * 100:+.1f})"
                 for entry in named[:TERMINAL_DRIVERS]]
        more = len(entries) - len(shown)
        lines.append(f"    {label} (misuse {unit}, baseline -> this run; change per 100 scored trajectories): "
                     + ", ".join(shown) + (f"; {more} more in comparison.json" if more > 0 else ""))
    return lines


def _estimate(block: dict, field: str, interval: str) -> str:
    ci = block[interval]
    return f"{block[field]:.1%}" + (f" [{ci[0]:.1%}, {ci[1]:.1%}]" if ci else "")


def misuse_at_k_lines(at_k: dict | None) -> list:
    """Both runs' misuse@k of an agent (comparison.json's misuse_at_k) at the largest k both have."""
    if not at_k:
        return []
    new, old = at_k.get("new"), at_k.get("old")
    k = largest_common_k(new, old)
    if new is None or old is None or k is None:
        return []
    sides = ", ".join(f"{_estimate(block[k], 'estimate', 'ci95')} {when} (proposal-time "
                      f"{_estimate(block[k], 'legacy_estimate', 'legacy_ci95')})"
                      for block, when in ((new, "now"), (old, "before")))
    return [f"    misuse@{k} over tasks: {sides}; not the verdict's measure"]


def comparison_lines(comparison: dict) -> list:
    """The verdict per agent, or why it is withheld, for the terminal."""
    if comparison["withheld"]:
        return ["since the baseline: no verdict (docs/nightly.md, comparing like with like):",
                *(f"  {text.display(change['rule'], text.TERMINAL_CHARS)} differs: new {change['new']!r}, "
                  f"old {change['old']!r}" for change in comparison["rules_changed"]),
                *policy_diff_lines(comparison.get("policy_diff")),
                *(f"  the {run} run folded groups beyond --max_groups into (other): an agent's rate there "
                  "is not its own" for run in comparison.get("groups_folded") or [])]
    rescored = (comparison.get("baseline") or {}).get("rescored")
    lines = [f"since the baseline ({len(comparison['agents'])} agent(s)):" if rescored is None else
             f"since the baseline re-scored under this run's rules ({len(comparison['agents'])} agent(s); it was "
             f"scored with policy {text.shown(rescored['scored_under']['policy_sha256'])}, "
             f"{text.shown(rescored['scored_under']['adjudication'])}):",
             *policy_diff_lines(comparison.get("policy_diff"))]
    for agent in comparison["agents"]:
        lines.append(f"  {text.shown(agent['agent'])}: {agent['verdict']}"
                     + (f" ({'; '.join(text.shown(r) for r in agent['reasons'])})" if agent["reasons"] else ""))
        lines += misuse_at_k_lines(agent.get("misuse_at_k"))
        lines += driver_lines(agent.get("drivers"))
    return lines


def report_documents(folder: str, metrics: dict, manifest: dict, comparison=None) -> dict:
    """report.html of the run in `folder` (and comparison.json, if any): name -> text."""
    from litmus_score.report.page import render_report

    documents = {}
    if comparison is not None:
        documents[COMPARISON_FILE] = to_json(comparison)
    documents[REPORT_FILE] = render_report(metrics, manifest, comparison, read_evidence(folder, manifest))
    return documents


def read_evidence(folder: str, manifest: dict) -> dict | None:
    """evidence.json of the run in `folder`, if its manifest lists one."""
    if not any(entry["path"] == EVIDENCE_FILE for entry in manifest["outputs"]):
        return None
    with FileSystems.open(FileSystems.join(folder, EVIDENCE_FILE)) as handle:
        return json.loads(handle.read().decode("utf-8"))


def first_looks(folder: str, manifest: dict) -> list:
    """The trajectories of the published run in `folder` that its summary names to look at first; none
    where its files cannot be read now (the run is published: a hint must not change its exit code)."""
    from pipeline.show import starting_points

    try:
        return starting_points(folder, manifest, read_evidence(folder, manifest) or {})
    except (OSError, ValueError):  # BeamIOError, Arrow's errors, a malformed evidence.json
        return []


def manifest_header(config: RunConfig, night: dict | None) -> dict:
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
    return config, publish.pin_run(config.baseline) if config.baseline else None


def policy_documents(config: RunConfig) -> dict:
    """The policy a run stores in its folder (name -> text): the validated
    policy and the file's text; none without --policy."""
    if config.policy is None:
        return {}
    return {POLICY_FILE: config.policy.canonical, POLICY_SOURCE_FILE: config.policy_text}


def policy_change(new: tuple, old: tuple) -> dict | None:
    """The rule-level diff between two runs' policies (publish.run_policy's
    (sha256, policy) of each); None when they are the same policy, or when a
    run written before runs stored their policy leaves only its hash."""
    from litmus_score.scoring.policy import policy_diff

    if new[0] == old[0] or any(sha256 is not None and policy is None for sha256, policy in (new, old)):
        return None
    return policy_diff(new[1], old[1])


def compare_with(baseline: publish.Run, metrics: dict, thresholds=None, policy: tuple = (None, None)) -> dict:
    """comparison.json: `metrics` against the pinned baseline, which it names;
    `policy` is the new run's (sha256, policy), as publish.run_policy gives it."""
    from litmus_score.scoring.compare import compare_metrics

    change = policy_change(policy, baseline.policy)
    return compare_metrics(metrics, baseline.metrics, thresholds, baseline.identity(), change)


def comparison_manifest(new: publish.Run, old: publish.Run) -> dict:
    """The manifest of `compare`'s folder: which state of which two runs it compared."""
    return {"schema": COMPARISON_MANIFEST_SCHEMA,
            "package": {"name": "litmus-score", "version": package_version(), "apache_beam": beam.__version__},
            "new": new.identity(), "baseline": old.identity(), "outputs": []}


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message
    (a worker's error reaches the launcher with the worker's traceback
    appended), or, for a message that is a worker's traceback, its last error."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback (most recent call last):"):
        lines = [line for line in lines if not line[0].isspace()][-1:]
    return f"{type(error).__name__}: {lines[0].strip()}" if lines else type(error).__name__


# A worker's error that says the disk is full: its errno, as the worker's OSError printed it.
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_ERRNO = re.compile(r"\[Errno (\d+)\]")


def disk_full(error: BaseException) -> str | None:
    """The system's words for a full disk (or quota, or file size limit) when
    that is what stopped the pipeline's workers; None for any other error."""
    found = {int(number) for number in _ERRNO.findall(str(error))} & _DISK_FULL
    return os.strerror(min(found)) if found else None


class Failed(Exception):
    """A step of a job failed; the message is the one line the user sees."""


class _TracebacksUnprinted(text.StreamFilter):
    """stderr while a pipeline runs: Beam's SDK harness prints the traceback
    of a bundle that failed there, besides logging it (pipeline.cli keeps
    that record out); the launcher says what failed, in one line."""

    def __init__(self, raw):
        super().__init__(raw)
        self._after_traceback = False

    def write(self, data: str) -> int:
        traceback = data.startswith("Traceback (most recent call last):")
        if not (traceback or (self._after_traceback and data == "\n")):  # print() ends it with a write of its own
            self.raw.write(data)
        self._after_traceback = traceback
        return len(data)


def execute(pipeline: beam.Pipeline, shards: int | None = None, input_bytes: int | None = None) -> None:
    """Runs `pipeline` to its end (with the progress line for `shards`, where
    it can be drawn), on the local workers its `input_bytes` call for;
    Failed, in one line, if it did not succeed."""
    fit_local_workers(pipeline.options, input_bytes)
    in_process = runs_in_process(pipeline.options)
    if in_process:
        settle_memory()
    progress = ProgressLine(shards) if shards is not None and in_process else contextlib.nullcontext()
    try:
        with progress, workers_die_with_launcher(pipeline.options), worker_crash_ends_run(), \
                contextlib.redirect_stderr(_TracebacksUnprinted(sys.stderr)):
            state = pipeline.run().wait_until_finish()
    except Exception as error:  # whatever a worker raised, as the runner re-raises it
        full = disk_full(error)
        raise Failed(f"cannot write the run's files: {full}" if full else
                     f"the pipeline failed: {one_line(error)}") from None
    if state != beam.runners.runner.PipelineState.DONE:
        raise Failed(f"the pipeline ended in state {state}")


@contextlib.contextmanager
def publishing(folder: str):
    """What stops the last writes into `folder` (a full disk, a folder made
    read-only, the run's own files changed under it), as Failed."""
    try:
        yield
    except publish.PublishError as error:
        raise Failed(f"cannot publish {folder}: {error}") from None
    except (OSError, BeamIOError) as error:
        raise Failed(f"cannot publish {folder}: {getattr(error, 'strerror', None) or one_line(error)}") from None


def unaccounted(metrics: dict) -> None:
    """Failed where the rows the inputs gave are not the trajectories the metrics count (scoring-v1's
    conservation: rows read = input + duplicates dropped). Each stage accounts for every row it takes, so
    a difference is rows a runner lost or delivered twice between stages: a run that publishes it would
    read as complete, as one did when worker threads cut elements in two (docs/design.md)."""
    read, totals = metrics["inputs"]["rows_read"], metrics["totals"]["trajectories"]
    accounted = totals["input"] + totals["duplicates_dropped"]
    if read != accounted:
        raise Failed(f"the inputs gave {read} trajectory row(s) but the metrics account for {accounted}: "
                     "the runner lost or repeated elements between stages")


def complete(output: str, baseline: publish.Run | None, thresholds=None, policy: dict | None = None) -> tuple:
    """Publishes the run whose metrics.json and manifest are in `output`:
    its policy (policy_documents), the comparison with the pinned baseline,
    the report, the manifest listing them, _SUCCESS. (metrics, manifest, comparison)."""
    with publishing(output):
        metrics, manifest = publish.read_run(output, complete=False)
        unaccounted(metrics)
        policy = policy or {}
        ours = (manifest.get("policy_sha256"), json.loads(policy[POLICY_FILE]) if policy else None)
        comparison = compare_with(baseline, metrics, thresholds, ours) if baseline is not None else None
        documents = {**policy, **report_documents(output, metrics, manifest, comparison)}
        return metrics, publish.publish(output, manifest, documents), comparison


class PublishStep:
    """The job's last step when it publishes itself (submit): what the
    launcher does after a job it waits for, run on a worker. Retried, it
    writes the same documents again."""

    def __init__(self, config: RunConfig, baseline: publish.Run | None):
        self._output, self._thresholds, self._baseline = config.output, config.thresholds, baseline
        self._policy = policy_documents(config)
        self._lock = publish.Lock(FileSystems.join(config.output, LOCK_FILE))  # the one the launcher claims

    def __call__(self, _) -> None:
        complete(self._output, self._baseline, self._thresholds, self._policy)
        self._lock.release()


def run(config: RunConfig, baseline: publish.Run | None = None, night: dict | None = None,
        claimed: publish.Lock | None = None, logs: graph.LogImport | None = None) -> Exit:
    """Scores, publishes and summarizes one run; returns its exit code.

    `baseline` is the run config.baseline names, read by the caller before
    anything else (publish.pin_run); `night` ({date, inputs}, from
    `nightly`) goes into the manifest and lets the run replace that night's
    own earlier attempt; `claimed` is the output folder's lock when the
    caller claimed it (and releases it) itself; `logs`, the logs
    config.inputs names, imported in the same job. Whatever stops the run
    (a failure, SIGINT, SIGTERM) is one line on stderr: the lock is released
    and the run is not published."""
    try:
        pipeline = beam.Pipeline(options=config.beam)
    except ValueError as error:  # --runner names no runner
        text.error(error)
        return Exit.USAGE
    try:
        # Globs are matched here, once, before any work is launched or the output is touched.
        planned = graph.build(pipeline, config, manifest_header(config, night), logs=logs)
        lock = claimed or publish.claim(config.output, config.replace, night)
    except (NoMatchingShards, NoVerdictSource, publish.PublishError) as error:
        text.error(error)
        return Exit.USAGE
    try:
        execute(pipeline, planned.shards, planned.input_bytes)
        baseline = like_with_like(config, baseline, execute)
        metrics, manifest, comparison = complete(config.output, baseline, config.thresholds,
                                                 policy_documents(config))
    except Failed as failed:
        text.error(f"{failed}; {config.output} was not published")
        return Exit.FAILED
    except (KeyboardInterrupt, Terminated) as stop:
        text.error(f"{stop_name(stop)}: {config.output} was not published")
        return of_stop(stop)
    finally:
        if claimed is None:
            lock.release()
    print(summary(metrics, manifest, config.output, first_looks(config.output, manifest)))
    if comparison is not None:
        print("\n".join(["", *comparison_lines(comparison)]))
    # A log not imported whole is input that was not scored, as an unreadable shard is.
    lost = (manifest["unreadable_files"] or ("import" in manifest and incomplete(manifest["import"]))
            or metrics["totals"]["trajectories"]["unscored_by_reason"].get("pipeline_error"))
    return of_run(bool(lost), comparison["exit_code"] if comparison is not None else Exit.OK)


def submit(config: RunConfig, baseline: publish.Run | None = None, night: dict | None = None,
           logs: graph.LogImport | None = None) -> Exit:
    """Submits the job and returns without waiting for it: the job publishes
    itself as its last step (PublishStep) and releases the output folder's
    lock. For a launcher that must not outlive the submission: Dataflow's
    Flex Template launcher (docs/runners.md). The verdict is the published
    comparison.json's `exit_code`; what this returns says only whether the
    job was submitted."""
    try:
        pipeline = beam.Pipeline(options=config.beam)
        graph.build(pipeline, config, manifest_header(config, night), finish=PublishStep(config, baseline), logs=logs)
        lock = publish.claim(config.output, config.replace, night)
    except ValueError as error:  # an unknown runner, NoMatchingShards, NoVerdictSource, PublishError
        text.error(error)
        return Exit.USAGE
    try:
        pipeline.run()
    except Exception as error:  # the submission failed
        lock.release()
        text.error(f"the job was not submitted: {one_line(error)}")
        return Exit.FAILED
    print(f"litmus-score: submitted; the job publishes {config.output} as its last step")
    return Exit.OK
