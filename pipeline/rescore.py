"""A verdict across a change of rules: the baseline's inputs scored again under tonight's.

When tonight is scored under other rules than its baseline (another policy,
adjudication mode or spec version), the baseline's rates do not compare
with tonight's. Its manifest names the files it read, each with the
identity it had then (`input_identities`: size, modification time, the
sha256 of its Parquet footer); when every one is still there and
unchanged, they are scored again under tonight's policy and mode (a
baseline that imported its logs imports them again as its manifest's
`import` says: format, default principal, harness verdict, bounds), and
tonight is compared with that, labelled as such (comparison.json's
`baseline.rescored`). When one moved or changed, the verdict is withheld
as before, with one line naming the file (docs/nightly.md).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from litmus_score import text
from litmus_score.scoring import contract as c
from litmus_score.scoring.layout import METRICS_FILE, TEMP_PREFIX
from pipeline.graph import LogInputs, ScoreTrajectories
from pipeline.options import RunConfig
from pipeline.publish import Run
from transforms.conform import UNREADABLE
from transforms.elements import FileIdentity
from transforms.files import delete_exactly, to_json, write_whole
from transforms.imports import ImportToScore
from transforms.shardfiles import identify, what_changed


class RescoreError(ValueError):
    """The baseline's inputs cannot be read again as they were; the message is one line."""


def tonights_rules(config: RunConfig) -> dict:
    """The rules tonight is scored under, as rules_of() states a run's."""
    return {"spec": c.METRICS_SCHEMA, "adjudication": config.mode, "policy_sha256": config.policy_sha256}


def check_inputs(baseline: Run) -> list:
    """The paths of the baseline's inputs, each checked to be the file it read; RescoreError naming the first
    that is not."""
    recorded = baseline.manifest.get("input_identities")
    if not isinstance(recorded, list) or not recorded:
        raise RescoreError(f"the baseline {baseline.folder} records no identities of its inputs "
                           "(written by an earlier litmus-score)")
    for entry in recorded:
        path = entry["file"]
        if entry["footer_sha256"] is None:
            raise RescoreError(f"baseline input {path} could not be read when the baseline was scored")
        try:
            found = identify(path)
        except UNREADABLE as error:
            raise RescoreError(f"baseline input {path} cannot be read now (moved or deleted?): "
                               f"{text.display(error, 200)}") from None
        change = what_changed(FileIdentity(entry["size"], entry["mtime_ns"], entry["footer_sha256"]), found)
        if change:
            raise RescoreError(f"baseline input {path} changed since the baseline read it ({change})")
    return [entry["file"] for entry in recorded]


def baseline_inputs(baseline: Run, paths: list, config: RunConfig):
    """What ScoreTrajectories reads of the baseline's inputs: its shards'
    paths, or its logs imported again as it imported them (LogInputs)."""
    imported = baseline.manifest.get("import")
    if imported is None:
        return paths
    principal = imported["principal"]
    attributes = principal.get("identity_attributes")
    try:
        return LogInputs(ImportToScore(imported["format"], paths, principal["default"], imported["harness_verdict"],
                                       max_sample_mib=imported["max_sample_mib"],
                                       identity_attributes=",".join(attributes) if attributes else None,
                                       max_text_bytes=config.bounds.max_text_bytes))
    except (ValueError, ImportError) as error:  # no longer matched, or the format's library is gone
        raise RescoreError(f"the baseline's logs cannot be imported again: {text.display(error, 200)}") from None


def rescored(baseline: Run, config: RunConfig, execute: Callable[[beam.Pipeline], None]) -> Run:
    """The baseline with the metrics of its inputs scored under tonight's
    policy and mode, run by `execute` (the launcher's: it raises, in one
    line, when the job fails); RescoreError when they cannot be read as
    they were or the job fails."""
    paths = check_inputs(baseline)
    score = ScoreTrajectories(baseline_inputs(baseline, paths, config), config.mode, config.batch_rows,
                              config.policy, config.bounds, config.max_slice_keys, config.max_groups, config.max_k)
    folder = FileSystems.join(config.output, f"{TEMP_PREFIX}rescore-{uuid.uuid4().hex}")
    pipeline = beam.Pipeline(options=config.beam)
    metrics = (pipeline | "Re-score the baseline's inputs" >> score)["metrics"]
    _ = metrics | "Keep the metrics" >> beam.Map(
        lambda document: write_whole(folder, METRICS_FILE, to_json(document).encode("utf-8")))
    try:
        execute(pipeline)
        with FileSystems.open(FileSystems.join(folder, METRICS_FILE)) as handle:
            document = json.loads(handle.read())
    except Exception as failed:  # whatever stopped the job: no verdict across the change, the night still published
        raise RescoreError(f"the baseline's inputs could not be scored again: {failed}") from None
    finally:
        if FileSystems.exists(folder):
            delete_exactly([folder])  # the output's name is a path, never a pattern
    then, now = baseline.metrics["inputs"]["rows_read"], document["inputs"]["rows_read"]
    if now != then:
        raise RescoreError(f"the baseline's inputs gave {now:,} rows when scored again, {then:,} when first read")
    from litmus_score.scoring.compare import rules_of  # see like_with_like

    label = {"rules": tonights_rules(config), "scored_under": rules_of(baseline.metrics)}
    return dataclasses.replace(baseline, metrics=document, rescored=label)


def like_with_like(config: RunConfig, baseline: Run | None,
                   execute: Callable[[beam.Pipeline], None]) -> Run | None:
    """The baseline tonight is compared with: as published when it was scored
    under tonight's rules, else re-scored under them; as published (the
    verdict withheld) with one line on stderr when it cannot be."""
    if baseline is None:
        return baseline
    # Here, not at the top: compare's pydantic models cost about 0.1 CPU-s of start-up, and only a
    # run with a baseline needs them.
    from litmus_score.scoring.compare import rules_changed, rules_of

    if not rules_changed(tonights_rules(config), rules_of(baseline.metrics)):
        return baseline
    try:
        return rescored(baseline, config, execute)
    except RescoreError as error:
        text.error(f"no verdict across the change of rules: {error}")
        return baseline
