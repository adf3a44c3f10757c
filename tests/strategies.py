"""Hypothesis strategies for adversarial trajectories.

Every field is usually well formed and sometimes not (about one draw in
twenty), so that fully scorable trajectories are common while every rule
still fires. Values come from small pools on purpose: collisions (duplicate
call ids, equal steps, byte-different but equal JSON) happen often.
"""

from hypothesis import strategies as st

from litmus_score.scoring import contract as c
from litmus_score.scoring import metrics
from litmus_score.scoring.trajectory import Bounds

# Bounds the odd values above exceed; with the defaults none do.
SMALL_BOUNDS = Bounds(max_calls_per_trajectory=4, max_text_bytes=64, max_json_depth=4)

GOOD_ARGUMENTS = [
    '{"amount": 100, "to": "acct-1"}',
    '{"to":"acct-1","amount":100}',  # same value, other bytes
    '{ "amount" : 100.0 , "to" : "acct-1" }',  # same value again
    '{"amount": "balance", "to": "acct-1"}',  # resolved later
    '{"path": "/etc/passwd", "mode": "0777", "recursive": null, "force": true}',
    '{"s": "line\\nbreak \\u00e9 \\"quoted\\""}',
    "{}",
]
ODD_ARGUMENTS = [
    " {\t}\n",
    '{"filter": {"id": "*"}, "limit": [1, {"x": []}]}',  # nested to the fast path's depth
    '{"deep": [[[{"x": 1}]]]}',  # deeper: valid, left to the reference parser
    '{"a": 1, "a": 2}',
    '{"a": 1e400}',
    '{"amount": true, "to": "acct-1"}',
    "[1, 2, 3]",
    '"just a string"',
    "{broken",
    '{"a": NaN}',
    '{"ctl": "\x01"}',
    "",
    "null",
    None,
    b'{"to": "acct-\xff"}',  # not UTF-8
    '{"a": [[[[[[[[1]]]]]]]]}',  # beyond a small depth bound
    '{"note": "' + "long text " * 8 + '"}',  # beyond a small size bound
]
# Three the example policy (configs/policy.yaml) names, and one it does not, on which it abstains:
# a recorded verdict there is no dispute.
TOOLS = ["transfer_funds", "chmod", "delete_records", "launch_rocket"]
PRINCIPALS = ["agent", "agent", "agent", "session-admin"]
ODD_PRINCIPALS = ["", None]
OUTCOMES = ["committed", "rejected", "gated", "error"]
ODD_OUTCOMES = ["partial", None]
ODD_VERDICTS = [None, "ALLOW", "maybe"]


@st.composite
def pick(draw, good, odd, odd_one_in=20):
    return draw(st.sampled_from(odd if draw(st.integers(1, odd_one_in)) == 1 else good))


@st.composite
def contexts(draw, commit=False):
    ctx = {
        "resolved_arguments": draw(pick(GOOD_ARGUMENTS, ODD_ARGUMENTS)),
        "principal": draw(pick(PRINCIPALS, ODD_PRINCIPALS)),
        "policy_verdict": draw(pick(list(c.VERDICTS), ODD_VERDICTS)),
        "at": None,
    }
    if commit:
        ctx.update(
            outcome=draw(pick(OUTCOMES, ODD_OUTCOMES)),
            status_code=draw(st.sampled_from([None, 200, 403, 409])),
            state_mutated=draw(st.sampled_from([None, True, False])),
        )
    return ctx


@st.composite
def calls(draw, index):
    return draw(pick([{
        "call_id": draw(pick([f"c{index}"], ["c0", None])),
        "step": draw(pick([index], [index - 1, 0, None, -5])),
        "tool": draw(pick(TOOLS, [None, b"chm\xc3od"])),
        "arguments": draw(pick(GOOD_ARGUMENTS, ODD_ARGUMENTS)),
        "proposal": draw(pick([draw(contexts())], [None])),
        "commit": draw(pick([draw(contexts(commit=True))], [None], odd_one_in=8)),
    }], [None], odd_one_in=60))


@st.composite
def trajectories(draw, trajectory_id):
    n = draw(st.integers(0, 5))
    row_calls = [draw(calls(i)) for i in range(n)]
    return {
        "schema_version": draw(pick([c.SCHEMA_VERSION], ["litmus-trajectory/2", None])),
        "run_id": draw(pick(["run-a", "run-b"], [None], odd_one_in=40)),
        "trajectory_id": trajectory_id,
        "agent": draw(pick(["alpha", "beta"], [None, b"al\xffpha"], odd_one_in=40)),
        "task_id": draw(st.sampled_from(["t1", "t2", "", metrics.NO_TASK, None])),
        "task_category": draw(st.sampled_from(["finance", "", None])),
        "episode_outcome": draw(pick(["completed", "timeout", "error"], ["truncated", None])),
        "verbal_stance": draw(st.sampled_from(["refused", "complied", "unclear", None])),
        "call_count": draw(pick([n], [n + 1, None])),
        "calls": draw(pick([row_calls], [None], odd_one_in=40)),
    }


@st.composite
def trajectory_lists(draw, max_size=40):
    """Trajectories with distinct ids, any of whose texts may be invalid
    UTF-8 (bytes), too long or too deep for SMALL_BOUNDS."""
    size = draw(st.integers(0, max_size))
    return [draw(trajectories(f"traj-{i:04d}")) for i in range(size)]
