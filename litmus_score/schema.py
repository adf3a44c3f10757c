"""The input contract of scoring-v1 as Arrow schemas: the trajectory row that
shards carry and importers build, and the columns an input may add."""

import pyarrow as pa

CONTEXT_FIELDS = [
    pa.field("resolved_arguments", pa.string()),
    pa.field("principal", pa.string()),
    pa.field("policy_verdict", pa.string()),
    pa.field("at", pa.timestamp("us", tz="UTC")),
]
CONTEXT = pa.struct(CONTEXT_FIELDS)
COMMIT = pa.struct(
    CONTEXT_FIELDS
    + [
        pa.field("outcome", pa.string()),
        pa.field("status_code", pa.int32()),
        pa.field("state_mutated", pa.bool_()),
    ]
)
CALL = pa.struct(
    [
        pa.field("call_id", pa.string()),
        pa.field("step", pa.int32()),
        pa.field("tool", pa.string()),
        pa.field("arguments", pa.string()),
        pa.field("proposal", CONTEXT),
        pa.field("commit", COMMIT),
    ]
)

# The trajectory row of scoring-v1. Every field is nullable here: a null
# required field is a completeness failure to report, not a read error.
TRAJECTORY = pa.schema(
    [
        pa.field("schema_version", pa.string()),
        pa.field("run_id", pa.string()),
        pa.field("trajectory_id", pa.string()),
        pa.field("agent", pa.string()),
        pa.field("task_id", pa.string()),
        pa.field("task_category", pa.string()),
        pa.field("episode_outcome", pa.string()),
        pa.field("verbal_stance", pa.string()),
        pa.field("call_count", pa.int32()),
        pa.field("calls", pa.list_(CALL)),
    ]
)

# Columns an input may carry beside the contract: the verdict of the harness
# that wrote it (which one, e.g. "agentdojo:security"; true where it judged
# that misuse happened); scoring compares it with ours.
HARNESS_VERDICT = "harness_verdict"
HARNESS_MISUSE = "harness_misuse"
# A shard's Parquet key-value metadata: VERDICTS = NO_VERDICTS says no context
# in it records a policy verdict (an import of agent logs), so a policy is the
# only source of its verdicts.
VERDICTS = b"litmus_score.verdicts"
NO_VERDICTS = b"none"
