"""Arrow schemas of the pipeline: what the read stage adds to the input
contract's rows, and the outputs. The contract itself is litmus_score.schema,
named here too so that a stage finds every schema in one place."""

import pyarrow as pa

from litmus_score.schema import CALL as CALL
from litmus_score.schema import COMMIT as COMMIT
from litmus_score.schema import CONTEXT as CONTEXT
from litmus_score.schema import HARNESS_MISUSE as HARNESS_MISUSE
from litmus_score.schema import HARNESS_VERDICT as HARNESS_VERDICT
from litmus_score.schema import NO_VERDICTS as NO_VERDICTS
from litmus_score.schema import TRAJECTORY as TRAJECTORY
from litmus_score.schema import VERDICTS as VERDICTS

# Provenance the reader adds to every row.
SOURCE_FILE = "_source_file"
SOURCE_ROW = "_source_row"
PROVENANCE = [pa.field(SOURCE_FILE, pa.string()), pa.field(SOURCE_ROW, pa.int64())]
# What reading found in a row (transforms.read): the paths of its texts that
# are not UTF-8, and of those over the size bound; null where none.
INVALID_TEXT = "_invalid_text"
TOO_LARGE = "_too_large"
READ_FLAGS = [pa.field(INVALID_TEXT, pa.string()), pa.field(TOO_LARGE, pa.string())]
# Prefix of an input column kept beside a contract or provenance column of
# the same name (one of an unreadable type, say).
RAW_PREFIX = "_input:"
# Columns of a read batch that are not extra input columns.
READ_COLUMNS = frozenset(TRAJECTORY.names) | {SOURCE_FILE, SOURCE_ROW, INVALID_TEXT, TOO_LARGE}
# Columns with few distinct values per run are dictionary-encoded: a million
# scored calls repeat a handful of runs, agents, categories and shard paths.
CATEGORICAL = pa.dictionary(pa.int32(), pa.string())
SCORED = pa.schema(
    [
        pa.field("run_id", CATEGORICAL),
        pa.field("agent", CATEGORICAL),
        pa.field("trajectory_id", pa.string()),
        pa.field("call_id", pa.string()),
        pa.field("step", pa.int32()),
        pa.field("tool", pa.string()),
        pa.field("category", CATEGORICAL),
        pa.field("realized", pa.bool_()),
        pa.field("proposal_verdict", pa.string()),
        pa.field("commit_verdict", pa.string()),
        pa.field("resolution_context", CATEGORICAL),
        # recorded or policy (with --policy, where a context recorded none).
        pa.field("proposal_verdict_source", CATEGORICAL),
        pa.field("commit_verdict_source", CATEGORICAL),
        # What gave each verdict: recorded, the policy's rule id, or allowed_principals, tools, default.
        pa.field("proposal_decided_by", CATEGORICAL),
        pa.field("commit_decided_by", CATEGORICAL),
        # A policy was given and disagrees with a recorded verdict of the call.
        pa.field("policy_disagreement", pa.bool_()),
        # Where the policy disagrees with a context's recorded verdict: the
        # policy's own verdict and what decided it (null elsewhere).
        pa.field("proposal_policy_ruling", CATEGORICAL),
        pa.field("proposal_policy_decided_by", CATEGORICAL),
        pa.field("commit_policy_ruling", CATEGORICAL),
        pa.field("commit_policy_decided_by", CATEGORICAL),
        # What the environment did (null without a commit).
        pa.field("outcome", CATEGORICAL),
        pa.field("status_code", pa.int32()),
        pa.field("state_mutated", pa.bool_()),
        pa.field("source_file", CATEGORICAL),
        pa.field("source_row", pa.int64()),
    ]
)

# One row per scored trajectory: its verdicts, and which calls made them.
TRAJECTORIES = pa.schema(
    [
        pa.field("run_id", CATEGORICAL),
        pa.field("agent", CATEGORICAL),
        pa.field("trajectory_id", pa.string()),
        pa.field("task_id", pa.string()),
        pa.field("task_category", CATEGORICAL),
        pa.field("verbal_stance", CATEGORICAL),
        pa.field("misuse", pa.bool_()),
        pa.field("legacy_misuse", pa.bool_()),
        pa.field("over_penalized", pa.bool_()),
        pa.field("under_penalized", pa.bool_()),
        pa.field("execution_hallucination", pa.bool_()),
        # call_ids whose category is misuse or escalated_misuse (proposal mode: flagged) ...
        pa.field("misuse_calls", pa.list_(pa.string())),
        # ... and those whose proposal verdict is deny.
        pa.field("flagged_calls", pa.list_(pa.string())),
        # What decided the verdict that made each of misuse_calls misuse, in its order (metrics' flagged_by_rule).
        pa.field("misuse_decided_by", pa.list_(pa.string())),
        pa.field("source_file", CATEGORICAL),
        pa.field("source_row", pa.int64()),
    ]
)

UNSCORED = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("agent", pa.string()),
        pa.field("trajectory_id", pa.string()),
        pa.field("reasons", pa.list_(pa.string())),
        pa.field("detail", pa.string()),
        pa.field("source_file", pa.string()),
        pa.field("source_row", pa.int64()),
        # How many calls the input row holds (calls.input in metrics.json).
        pa.field("input_calls", pa.int64()),
        # The whole input row: the contract's columns as read, typed ...
        pa.field("input_row", pa.struct(list(TRAJECTORY))),
        # ... and every other input column, as a JSON object (null if none).
        pa.field("extra_columns", pa.string()),
    ]
)
