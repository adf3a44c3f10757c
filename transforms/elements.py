"""What travels between the stages: the element types, their coders and the output tags.

Every stage reads and writes these and imports no other stage, so the
stages are siblings (TFMA passes one shared type between its extractors the
same way). A stage's main output is one of the element types below; its
tagged outputs are named by `Tag`.

    Shard        a matched input file          -> Read shards
    RecordBatch  trajectories, read and conformed (schema.TRAJECTORY + provenance and read flags)
    Checked      a batch and its complete rows  -> Resolve contexts
    Resolved     scored calls' contexts settled -> Classify

Each stage names the element type it takes (and gives, where it gives one
PCollection) with `@beam.typehints.with_input_types`/`with_output_types` on
its class, and its ParDos name their tagged outputs' types: pipeline type
checking compares them where stages meet, when the graph is built. The
`expand()` annotations say the same for mypy and readers; Beam reads none
of them (the modules postpone annotations, which leaves Beam strings), and
it would only warn about a dict or tuple of outputs as a return type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from transforms import schema as s
from transforms.coders import ArrowCoder, batch_from_ipc, from_ipc, join, registered, split, to_ipc


class Tag:
    """Names of the stages' tagged outputs (the schemas of the same names are in transforms.schema)."""

    # pa.Tables of UNSCORED records (schema.UNSCORED): expected failures, as data.
    UNSCORED = "unscored"
    # The safety net's dead letters: (element, (type, repr, traceback)) of a batch that raised.
    FAILED = "failed"
    # One dict per input file: its rows declared and read, and what went wrong.
    SHARD_REPORTS = "shard_reports"
    # Per-group statistics in litmus_score.scoring.metrics' nested form, to be summed.
    STATS = "stats"
    # The validity audit's statistics, in the same form.
    VALIDITY = "validity"
    # pa.Tables of scored trajectories (schema.TRAJECTORIES).
    TRAJECTORIES = "trajectories"
    # Per batch, the evidence cases it holds (transforms.evidence).
    EVIDENCE = "evidence"


@dataclass(frozen=True)
class FileIdentity:
    """A file as the run found it when the patterns were matched: every later
    open must find the same size, modification time and Parquet footer.
    `rows` is what that footer declares (None: no readable footer)."""

    size: int
    mtime_ns: int
    footer_sha256: str
    rows: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Shard:
    """A path the input patterns matched: read it, or report why not (`error`).

    `aliases` are other spellings of the same path, `copies` other files
    whose bytes are identical (read once, here), `identity` what every open
    checks (None only for a Shard built by hand, which is not checked)."""

    path: str
    aliases: tuple = ()
    error: str | None = None
    identity: FileIdentity | None = None
    copies: tuple = ()


@dataclass(frozen=True)
class Checked:
    """A read batch and which of its rows are complete.

    The batch travels whole: filtering would copy every call's strings, and
    the incomplete rows have already left as UNSCORED records.
    """

    batch: pa.RecordBatch
    complete: np.ndarray  # bool per row, some True


RESOLVED_TRAJECTORIES = pa.schema(
    [
        s.TRAJECTORY.field(name)
        for name in ("run_id", "agent", "trajectory_id", "task_id", "task_category", "verbal_stance")
    ]
    + s.PROVENANCE
)
RESOLVED_CALLS = pa.schema(
    [
        pa.field("trajectory", pa.int64()),  # row of Resolved.trajectories
        pa.field("call_id", pa.string()),
        pa.field("step", pa.int32()),
        pa.field("tool", pa.string()),
        pa.field("proposal_verdict", pa.string()),
        pa.field("commit_verdict", pa.string()),
        pa.field("realized", pa.bool_()),
        pa.field("state_mutated", pa.bool_()),
        pa.field("proposal_verdict_source", pa.string()),
        pa.field("commit_verdict_source", pa.string()),
        pa.field("proposal_decided_by", pa.string()),
        pa.field("commit_decided_by", pa.string()),
        pa.field("proposal_policy_ruling", pa.string()),
        pa.field("proposal_policy_decided_by", pa.string()),
        pa.field("commit_policy_ruling", pa.string()),
        pa.field("commit_policy_decided_by", pa.string()),
        pa.field("policy_disagreement", pa.bool_()),
        pa.field("outcome", pa.string()),
        pa.field("status_code", pa.int32()),
        pa.field("source_call", pa.int64()),  # element of Resolved.inputs
    ]
)


@dataclass(frozen=True)
class Resolved:
    """Trajectories whose every call has its verdicts and realization settled."""

    trajectories: pa.Table  # RESOLVED_TRAJECTORIES
    calls: pa.Table  # RESOLVED_CALLS
    # The batch's calls as read (schema.CALL), not copied: where the few
    # calls shown as evidence take their arguments and contexts from.
    inputs: pa.Table


@registered
class CheckedCoder(ArrowCoder):
    element_type = Checked

    def encode(self, value: Checked) -> bytes:
        return join(to_ipc(value.batch), np.packbits(value.complete).tobytes())

    def decode(self, encoded: bytes) -> Checked:
        batch, mask = split(encoded, 2)
        batch = batch_from_ipc(batch)
        complete = np.unpackbits(np.frombuffer(mask, np.uint8), count=batch.num_rows).astype(bool)
        return Checked(batch, complete)

    def estimate_size(self, value: Checked) -> int:
        return value.batch.nbytes + value.complete.nbytes


@registered
class ResolvedCoder(ArrowCoder):
    element_type = Resolved

    def encode(self, value: Resolved) -> bytes:
        return join(to_ipc(value.trajectories), to_ipc(value.calls), to_ipc(value.inputs))

    def decode(self, encoded: bytes) -> Resolved:
        return Resolved(*map(from_ipc, split(encoded, 3)))

    def estimate_size(self, value: Resolved) -> int:
        return value.trajectories.nbytes + value.calls.nbytes + value.inputs.nbytes
