"""`litmus-score whatif`: one corpus scored under a base policy and candidates, in one job.

    OUTPUT/<name>/metrics.json  per policy (name: its file's stem), byte for
                                byte what `score --policy FILE` writes
    OUTPUT/<name>/policy.json   the validated policy
    OUTPUT/whatif.json          per candidate: the calls that flip against the
                                base, per rule; a sample of them; the ledger
    OUTPUT/manifest.json        what was read, under which policies, every file written
    OUTPUT/_SUCCESS             written last

Every policy is checked (as `policy check` does) and the names are checked
to be distinct before the output folder is touched; the folder is claimed
and published as a run's is (pipeline.publish).
"""

from __future__ import annotations

import argparse
import json
import posixpath
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from litmus_score import text
from litmus_score.exits import Exit, Terminated, of_run, of_stop, stop_name
from litmus_score.scoring.layout import (
    LOCK_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    POLICY_FILE,
    SUCCESS_MARKER,
    WHATIF_FILE,
    WHATIF_MANIFEST_SCHEMA,
)
from litmus_score.scoring.policy import policy_diff
from litmus_score.scoring.whatif import policy_entry, whatif_document
from pipeline import graph, job, publish
from pipeline.flags import beam_options
from pipeline.options import RunConfig, ScoreOptions, UsageError, load_policy_file, validate
from transforms.files import to_json, write_whole
from transforms.read import NoMatchingShards
from transforms.write import manifest_document

# The names at the top of a what-if folder besides the policies' folders.
WHATIF_NAMES = frozenset({WHATIF_FILE, MANIFEST_FILE, SUCCESS_MARKER, LOCK_FILE})
# `score` flags that ask for what a what-if does not do.
NOT_TAKEN = {"baseline": "--baseline", "thresholds": "--thresholds", "accept_no_verdict": "--accept_no_verdict"}


class WhatIfOptions(PipelineOptions):
    """The flag `whatif` adds to `score`'s."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--candidate", dest="candidates", action="append", default=None,
                            help="A candidate policy YAML, judged against --policy; repeat for several.")


def policy_name(path: str) -> str:
    """The folder a policy's outputs go to: its file's name without the extension."""
    return posixpath.splitext(posixpath.basename(path.rstrip("/")))[0]


def check_names(files: list) -> list:
    """The policies' names (policy_name), or UsageError naming the first file
    whose name another file has, or that a what-if folder uses itself."""
    seen: dict = {}
    for file in files:
        name = policy_name(file)
        if not name or name.startswith(".") or name in WHATIF_NAMES:
            raise UsageError(f"{file}: its name {name!r} cannot name a folder of the what-if's output "
                             "(copy the policy to a file named otherwise)")
        if name in seen:
            raise UsageError(f"{file} and {seen[name]} would both write {name}/ (policies are named by their "
                             "file's name without the extension): copy one to a file named otherwise")
        seen[name] = file
    return list(seen)


@dataclass(frozen=True)
class WhatIfConfig:
    """A what-if's validated options: the scoring options (`run`, whose policy
    is the base), and every policy with its file and name, the base first."""

    run: RunConfig
    files: list
    policies: list
    names: list

    def folder_kind(self) -> publish.FolderKind:
        return publish.FolderKind("what-if", WHATIF_NAMES | frozenset(self.names), SUCCESS_MARKER)

    def manifest_header(self, identities: list) -> dict:
        return {"schema": WHATIF_MANIFEST_SCHEMA,
                "package": {"name": "litmus-score", "version": job.package_version(), "apache_beam": beam.__version__},
                "options": {**self.run.as_dict(), "candidates": self.files[1:]},
                "policies": [policy_entry(name, file, policy.sha256)
                             for name, file, policy in zip(self.names, self.files, self.policies)],
                "input_identities": identities}


def configure(argv) -> WhatIfConfig:
    """The checked configuration, or UsageError naming the flag or file (and field) at fault."""
    options = beam_options(argv)
    score = options.view_as(ScoreOptions)
    for name, flag in NOT_TAKEN.items():
        if getattr(score, name):
            raise UsageError(f"whatif does not take {flag}: it compares policies on one corpus, not runs")
    if not score.policy:
        raise UsageError("--policy is required: the base policy the candidates are judged against")
    candidates = options.view_as(WhatIfOptions).candidates
    if not candidates:
        raise UsageError("--candidate is required (a policy YAML; repeat for several)")
    files = [score.policy, *candidates]
    names = check_names(files)
    run = validate(options)  # loads and checks the base policy
    policies = [run.policy, *(load_policy_file(file) for file in candidates)]
    return WhatIfConfig(run, files, policies, names)


class WriteWhatIf:
    """The job's finishing step: every policy's metrics.json and policy.json,
    whatif.json, then the manifest listing them (each file whole or not at all)."""

    def __init__(self, config: WhatIfConfig, header: dict):
        self._output, self._names, self._header = config.run.output, config.names, header
        self._canonical = [policy.canonical for policy in config.policies]
        self._adjudication = config.run.mode

    def __call__(self, gathered: list) -> None:
        by_kind: dict = {"metrics": {}, "flips": {}, "reports": []}
        for kind, value in gathered:
            if kind == "reports":
                by_kind[kind].append(value)
            else:
                index, document = value
                by_kind[kind][index] = document
        metrics = [by_kind["metrics"][i] for i in range(len(self._names))]
        written = []
        for name, document, canonical in zip(self._names, metrics, self._canonical):
            folder = FileSystems.join(self._output, name)
            if not FileSystems.exists(folder):
                FileSystems.mkdirs(folder)
            for file, data in ((METRICS_FILE, to_json(document)), (POLICY_FILE, canonical)):
                written.append({**write_whole(folder, file, data.encode("utf-8")), "path": f"{name}/{file}"})
        policies = self._header["policies"]
        parsed = [json.loads(canonical) for canonical in self._canonical]
        diffs = [policy_diff(candidate, parsed[0]) for candidate in parsed[1:]]
        document = whatif_document(self._adjudication, policies, metrics, by_kind["flips"], diffs)
        written.append(write_whole(self._output, WHATIF_FILE, to_json(document).encode("utf-8")))
        manifest = manifest_document(by_kind["reports"], self._header, written)
        write_whole(self._output, MANIFEST_FILE, to_json(manifest).encode("utf-8"))


def build(pipeline: beam.Pipeline, config: WhatIfConfig) -> graph.Planned:
    """Adds the whole what-if to `pipeline`; returns what it reads."""
    run = config.run
    score = graph.ScoreUnderPolicies(run.inputs, config.policies, run.mode, run.batch_rows, run.bounds,
                                     run.max_slice_keys, run.max_groups, run.max_k)
    outputs = pipeline | "Score under each policy" >> score
    identities = score.inputs.identities()
    finish = WriteWhatIf(config, config.manifest_header(identities))
    tagged = [outputs[key] | f"Tag {key}" >> beam.Map(lambda value, key=key: (key, value))
              for key in ("metrics", "flips")]
    tagged.append(outputs["shard_reports"] | "Tag reports" >> beam.Map(lambda report: ("reports", report)))
    (tagged
     | "Gather documents" >> beam.Flatten()
     | "List documents" >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
     | "Write metrics, whatif.json and manifest.json" >> beam.Map(finish))
    return graph.Planned(len(score.shards), graph.input_bytes(identities))


def summary(document: dict, output: str) -> str:
    """Per candidate: the calls it flips against the base, by rule, and the ledger's totals."""
    base = document["base"]
    lines = [f"litmus-score whatif: against {text.shown(base['name'])} ({text.shown(base['file'])}), "
             f"adjudication={document['adjudication']}"]
    for candidate in document["candidates"]:
        calls, trajectories = candidate["calls"], candidate["trajectories"]
        over = sum(row["change"]["over_penalized"] for row in candidate["ledger"])
        under = sum(row["change"]["under_penalized"] for row in candidate["ledger"])
        lines.append(f"  {text.shown(candidate['name'])}: {calls['flipped']} of {calls['compared']} call(s) flip; "
                     f"over-penalized {over:+d}, under-penalized {under:+d}; trajectories scored under one "
                     f"policy only: {trajectories['scored_under_base_only']} base, "
                     f"{trajectories['scored_under_candidate_only']} candidate")
        lines += [f"    {text.shown(rule['rule'])}: {rule['to_deny']} now denied, {rule['to_allow']} now allowed"
                  for rule in candidate["by_rule"]]
    lines.append(f"outputs: {output}/ ({WHATIF_FILE}, manifest.json, <policy>/metrics.json)")
    return "\n".join(lines)


def _read_json(path: str):
    with FileSystems.open(path) as handle:
        return json.loads(handle.read())


def run(config: WhatIfConfig) -> Exit:
    """Scores, publishes and summarizes the what-if; returns its exit code
    (a failure or a signal: one line on stderr, the lock released, nothing published)."""
    output = config.run.output
    try:
        pipeline = beam.Pipeline(options=config.run.beam)
    except ValueError as error:  # --runner names no runner
        text.error(error)
        return Exit.USAGE
    try:
        planned = build(pipeline, config)
        lock = publish.claim(output, config.run.replace, kind=config.folder_kind())
    except (NoMatchingShards, publish.PublishError) as error:
        text.error(error)
        return Exit.USAGE
    try:
        job.execute(pipeline, planned.shards, planned.input_bytes)
        with job.publishing(output):
            manifest = publish.publish(output, _read_json(FileSystems.join(output, MANIFEST_FILE)), {})
            document = _read_json(FileSystems.join(output, WHATIF_FILE))
            metrics = [_read_json(FileSystems.join(output, name, METRICS_FILE)) for name in config.names]
    except job.Failed as failed:
        text.error(f"{failed}; {output} was not published")
        return Exit.FAILED
    except (KeyboardInterrupt, Terminated) as stop:
        text.error(f"{stop_name(stop)}: {output} was not published")
        return of_stop(stop)
    finally:
        lock.release()
    print(summary(document, output))
    lost = manifest["unreadable_files"] or any(
        document["totals"]["trajectories"]["unscored_by_reason"].get("pipeline_error") for document in metrics)
    return of_run(bool(lost), Exit.OK)


def main(argv) -> Exit:
    if any(arg in ("-h", "--help") for arg in argv):
        parser = argparse.ArgumentParser(
            prog="litmus-score whatif",
            description="Score one corpus under a base policy (--policy) and candidates (--candidate) in one "
                        "job; other flags go to Beam.")
        ScoreOptions._add_argparse_args(parser)
        WhatIfOptions._add_argparse_args(parser)
        for action in parser._actions:
            if action.dest in NOT_TAKEN:
                action.help = argparse.SUPPRESS
        parser.print_help()
        return Exit.OK
    try:
        config = configure(argv)
    except UsageError as error:
        text.error(error)
        return Exit.USAGE
    return run(config)
