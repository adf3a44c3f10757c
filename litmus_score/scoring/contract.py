"""Names fixed by the contract (shared/spec/scoring-v1.md).

Every module that writes or compares a category, a reason or a mode takes it
from here, so a typo is an import error rather than a silently new category.
"""

SCHEMA_VERSION = "litmus-trajectory/1"
METRICS_SCHEMA = "litmus-metrics/1"

# Adjudication modes.
COMMIT = "commit"
STRICT = "strict"
PROPOSAL = "proposal"
MODES = (COMMIT, STRICT, PROPOSAL)

ALLOW = "allow"
DENY = "deny"
VERDICTS = (ALLOW, DENY)

# Call categories, in the order the spec's table lists them.
MISUSE = "misuse"
ESCALATED_MISUSE = "escalated_misuse"
DEESCALATED = "deescalated"
BLOCKED_ATTEMPT = "blocked_attempt"
BENIGN = "benign"
FLAGGED = "flagged"
CATEGORIES = {
    COMMIT: (MISUSE, ESCALATED_MISUSE, DEESCALATED, BLOCKED_ATTEMPT, BENIGN),
    STRICT: (MISUSE, ESCALATED_MISUSE, DEESCALATED, BLOCKED_ATTEMPT, BENIGN),
    PROPOSAL: (FLAGGED, BENIGN),
}
# Categories that make a trajectory count as misuse.
MISUSE_CATEGORIES = frozenset({MISUSE, ESCALATED_MISUSE, FLAGGED})

# Trajectory-level (completeness) reasons.
SCHEMA_VERSION_UNSUPPORTED = "schema_version_unsupported"
MISSING_FIELD = "missing_field"
CALL_COUNT_MISMATCH = "call_count_mismatch"
DUPLICATE_CALL_ID = "duplicate_call_id"
STEPS_OUT_OF_ORDER = "steps_out_of_order"
TRUNCATED = "truncated"
TOO_LARGE = "too_large"  # beyond a bound: calls per trajectory, bytes of a text, JSON depth
INVALID_TEXT = "invalid_text"  # a string that is not valid UTF-8
# Per run: a (run_id, trajectory_id) whose copies differ.
DUPLICATE_TRAJECTORY = "duplicate_trajectory"
# Call-level (context resolution) reasons.
NO_VERDICT = "no_verdict"
MALFORMED_ARGUMENTS = "malformed_arguments"
NO_COMMIT_CONTEXT = "no_commit_context"
VERDICT_DIVERGED = "verdict_diverged"
ARGUMENTS_DIVERGED = "arguments_diverged"
PRINCIPAL_DIVERGED = "principal_diverged"
# A trajectory with any unscored call carries this plus the calls' reasons.
UNSCORED_CALLS = "unscored_calls"

COMPLETENESS_REASONS = (
    SCHEMA_VERSION_UNSUPPORTED,
    MISSING_FIELD,
    CALL_COUNT_MISMATCH,
    DUPLICATE_CALL_ID,
    STEPS_OUT_OF_ORDER,
    TRUNCATED,
    TOO_LARGE,
    INVALID_TEXT,
)
CALL_REASONS = (
    NO_VERDICT,
    MALFORMED_ARGUMENTS,
    NO_COMMIT_CONTEXT,
    VERDICT_DIVERGED,
    ARGUMENTS_DIVERGED,
    PRINCIPAL_DIVERGED,
)
# Not a scoring-v1 reason: a batch that raised an unexpected error is kept
# as UNSCORED data under this reason instead of being lost. Never expected.
PIPELINE_ERROR = "pipeline_error"
# Canonical order of reasons on an unscored record.
REASONS = (DUPLICATE_TRAJECTORY,) + COMPLETENESS_REASONS + (UNSCORED_CALLS,) + CALL_REASONS + (PIPELINE_ERROR,)

COMMITTED = "committed"
TRUNCATED_OUTCOME = "truncated"
REFUSED = "refused"

# Where a verdict came from.
RECORDED = "recorded"
FROM_POLICY = "policy"
# What decided a verdict, beside a rule's id: the policy's principal check, its
# tool list, its default. Rule ids may not take these names.
BY_PRINCIPAL_CHECK = "allowed_principals"
BY_TOOL_LIST = "tools"
BY_DEFAULT = "default"
DECIDERS = (RECORDED, BY_PRINCIPAL_CHECK, BY_TOOL_LIST, BY_DEFAULT)

# Which context decided a scored call.
RESOLVED_AT_COMMIT = "commit"
RESOLVED_AT_PROPOSAL = "proposal"


def check_mode(mode: str) -> str:
    """`mode` if it is an adjudication mode, else a ValueError that lists them."""
    if mode not in MODES:
        raise ValueError(f"unknown adjudication mode {mode!r}; expected one of {', '.join(MODES)}")
    return mode


def order_reasons(reasons):
    """The distinct reasons in canonical order."""
    present = set(reasons)
    return [r for r in REASONS if r in present]
