"""The compiled policy (transforms.policy) equals the statement (litmus_score.scoring.policy).

Hypothesis draws policies one operator at a time, with the operands and the
argument values the statement's docstring singles out (1 and 1.0, booleans
that are not numbers, dotted keys, paths through non-objects, strings over
the length bound or holding a lone surrogate, integers beyond 2**53, nested
lists), and compares every call's ruling with the statement's: on parsed
arguments (the pure-Python path) and, where transforms._native is in use, on
their JSON texts, written every way JSON allows (tests/json_texts.py).
"""

import fnmatch
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from litmus_score.scoring.policy import MAX_SUBJECT_LENGTH, load_policy, parse_policy
from tests.json_texts import IDS, IMPLEMENTATIONS, examples, plain_text, texts_of
from tests.test_policy import CASES
from transforms import jsontext
from transforms.policy import ArgumentTexts, CompiledPolicy, PerCallPolicy, compile_policy, glob_regex

EXAMPLE = load_policy(Path(__file__).resolve().parent.parent / "configs" / "policy.yaml")
SETTINGS = settings(max_examples=examples(75), deadline=None, suppress_health_check=[HealthCheck.too_slow])

LONG = "x" * MAX_SUBJECT_LENGTH
TEXTS = st.sampled_from(["", "x", "xy", "xxy", "/etc/x", "/ETC/x", "a/b", "a.b", "é", "東京", "\n", "a@evil.example",
                         "[", "!", "-", "\\", "1", "true", "null", LONG, LONG + "y", "\ud800", "a\udc00y"]) | st.text(
    max_size=6)
NUMBERS = st.sampled_from([0, -0.0, 1, 1.0, 2, -1, 0.5, 2 ** 53, 2 ** 53 + 1, -(2 ** 63), 10 ** 30, 1e300,
                           float("inf"), -float("inf")]) | st.integers(-5, 5) | st.floats(-1e6, 1e6)
SCALARS = st.none() | st.booleans() | NUMBERS | TEXTS
# The values the statement's docstring singles out, so that each meets each operator.
HOSTILE_VALUES = [LONG + "y", LONG, "\ud800", "a\udc00y", 2 ** 53 + 1, 9007199254740992, -(2 ** 53) - 1, 10 ** 30,
                  True, False, 1, 1.0, 0, -0.0, 0.5, float("inf"), None, "x", "xxy", "1", "true", "/etc/x", "",
                  [1, 2], [2, 1], {"a": [1, 2]}, {}, [], [LONG + "y"], ["\ud800"], ["x", "a@evil.example"],
                  [{"n": 1}, {"n": 0}], [{"n": 2 ** 53 + 1}], [[1], 1], [None], {"b": "xxy"}, {"b": [1, 2]},
                  {"b": LONG + "y"}, {"b": None}, {"a.b": 1}]
HOSTILE = st.sampled_from(HOSTILE_VALUES)
VALUES = HOSTILE | st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                                | st.dictionaries(st.sampled_from(["v", "a", "b", "n", "a.b"]), inner, max_size=3),
                                max_leaves=8)
ARGUMENTS = st.dictionaries(st.sampled_from(["v", "a", "n", "b", "a.b"]), VALUES, max_size=4)

# Sets, ranges (reversed ones too), negation and an unclosed [, as tokens.
GLOB_PATTERNS = st.lists(st.sampled_from(["*", "?", "[", "]", "!", "-", "a", "b", "x", "^", "\\", "é", "/", ".",
                                          "[a-c]", "[!b]", "[x-a]", "[--a]", "[]]", "[!]", "[a-]", "[b-a-c]"]),
                         max_size=5).map("".join)
REGEXES = st.sampled_from(["x+y", "^x", "y$", "(?i)ETC", r"\d", "^$", ".", "(a+)+$", r"\pL", "é", r"^\s*$",
                           r"\bx\b", "[^x]", "a|b", "^(?:0o?)?[0-7]?[0-7]{2}[2367]$"])
# Operands the docstring's rules turn on: 1 == 1.0, true != 1, null, containers compared as values.
OPERANDS = st.sampled_from([None, True, False, 1, 1.0, 0, "x", "1", "true", [1, 2], [2, 1], {"a": [1, 2]}, {},
                            2 ** 53, 2 ** 53 + 1, 10 ** 30, "\ud800"]) | SCALARS
THRESHOLDS = st.sampled_from([0.0, -0.0, 1.0, 0.5, float(2 ** 53), 1e300, -1e300, 9007199254740993.0]) | st.floats(
    -10, 10, allow_nan=False)

OPERATORS = ("exists", "equals", "not_equals", "in", "not_in", "glob", "not_glob", "regex", "not_regex",
             "gt", "ge", "lt", "le", "any", "all")


def operand(operator, draw):
    if operator == "exists":
        return draw(st.booleans())
    if operator in ("equals", "not_equals"):
        return draw(OPERANDS)
    if operator in ("in", "not_in"):
        return draw(st.lists(OPERANDS, max_size=4))
    if operator in ("glob", "not_glob"):
        return draw(GLOB_PATTERNS)
    if operator in ("regex", "not_regex"):
        return draw(REGEXES)
    if operator in ("any", "all"):
        return draw(conditions(inner=True))
    return draw(THRESHOLDS)


@st.composite
def conditions(draw, operator=None, inner=False):
    operator = operator or draw(st.sampled_from(OPERATORS if draw(st.integers(0, 3)) else ("exists", "equals")))
    condition = {operator: operand(operator, draw)}
    arg = draw(st.sampled_from([None, None, "n", "b", "a.b"] if inner else ["v", "a.b", "a", "n"]))
    return condition if arg is None else {"arg": arg, **condition}


@st.composite
def policies(draw, operator):
    """A policy whose first rule holds `operator`; others may add any operator."""
    rules = []
    for index in range(draw(st.integers(1, 3))):
        rule = {"id": f"r{index}", "effect": "deny",
                "when": [draw(conditions(operator if index == 0 else None)) for _ in range(draw(st.integers(1, 2)))]}
        tool = draw(st.sampled_from(["t", "u", "t*", "[tu]", None]))
        if tool is not None:
            rule["tool"] = tool
        if draw(st.integers(0, 4)) == 0:
            rule["principal"] = {draw(st.sampled_from(["in", "not_in"])): ["agent"]}
        rules.append(rule)
    document = {"schema": "litmus-policy/1", "rules": rules, "tools": draw(st.sampled_from([[], ["t"], ["u", "w"]])),
                "default": draw(st.sampled_from([None, "allow", "deny"]))}
    if draw(st.booleans()):
        document["allowed_principals"] = ["agent", "ops"]
    return parse_policy(document)


CALLS = st.lists(st.tuples(st.sampled_from(["t", "u", "w", "tx", ""]), ARGUMENTS,
                           st.sampled_from(["agent", "ops", "root"])), min_size=1, max_size=30)


def rulings(policy, calls, compiled=False, data=None):
    """The decisions (verdict, decided_by) of `policy` for (tool, arguments, principal) calls: on the
    parsed arguments, or (`compiled`) on JSON texts of them, drawn from `data` or else written compactly."""
    tools, arguments, principals = zip(*calls)
    asked = list(arguments)
    if compiled:
        texts = [plain_text(a) if data is None else data.draw(texts_of(a)) for a in arguments]
        asked = ArgumentTexts(pa.array(texts, pa.string()), np.arange(len(texts)))
    with jsontext.implementation(compiled):
        codes = policy.rulings(pa.array(tools, pa.string()), pa.array(principals, pa.string()), asked)
    return [policy.decisions[code] for code in codes.tolist()]


def verdicts(policy, calls, compiled=False):
    return [verdict for verdict, _ in rulings(policy, calls, compiled)]


implementations = pytest.mark.parametrize("compiled", IMPLEMENTATIONS, ids=IDS)


@implementations
@pytest.mark.parametrize("operator", OPERATORS)
@SETTINGS
@given(data=st.data())
def test_compiled_policy_equals_the_statement(compiled, operator, data):
    policy = data.draw(policies(operator))
    calls = data.draw(CALLS)
    assert rulings(CompiledPolicy(policy), calls, compiled, data) == [policy.decide(*call) for call in calls]


# Operands per operator for the table below; inner conditions for any and all.
INNER = [{"gt": 0}, {"regex": "x"}, {"not_glob": "*@example.com"}, {"arg": "n", "ge": 1}, {"exists": False},
         {"arg": "n", "exists": True}, {"equals": 1}, {"in": [[1], None]}, {"any": {"equals": 1}}]
TABLE = {
    "exists": [True, False], "equals": [1, None, True, "x", [1, 2], {"a": [1, 2]}, 2 ** 53, 10 ** 30, "\ud800"],
    "not_equals": [1, None, [2, 1]], "in": [[1, "x", None], [[1, 2], False], [9007199254740993, 0]],
    "not_in": [[1, "x"], [{"a": [1, 2]}]], "glob": ["*x*", "/etc/*", "[!x]*", "x?y"], "not_glob": ["*y", ""],
    "regex": ["x+y", "^$", "(?i)X", "y$"], "not_regex": ["^x", "."], "gt": [0.0, float(2 ** 53), 1e30],
    "ge": [1.0, -0.0], "lt": [0.5, 1e300], "le": [9007199254740992.0, -1.0], "any": INNER, "all": INNER,
}


@implementations
@pytest.mark.parametrize("operator", OPERATORS)
def test_every_operator_on_every_hostile_value(compiled, operator):
    subjects = [{"v": value} for value in HOSTILE_VALUES] + [{"a": {"b": v}} for v in HOSTILE_VALUES] + [{}]
    for operand in TABLE[operator]:
        for arg in ("v", "a.b"):
            policy = parse_policy({"schema": "litmus-policy/1", "rules": [
                {"id": "r", "tool": "t", "when": [{"arg": arg, operator: operand}], "effect": "deny"}]})
            calls = [("t", subject, "agent") for subject in subjects]
            expected = [policy.decide(*call) for call in calls]
            assert rulings(CompiledPolicy(policy), calls, compiled) == expected, (arg, operand)


@implementations
@SETTINGS
@given(calls=st.lists(st.tuples(st.sampled_from([tool for tool, *_ in CASES] + ["other"]),
                                st.sampled_from([arguments for _, arguments, *_ in CASES]) | ARGUMENTS,
                                st.sampled_from(["agent", "agent-ops", "session-admin"])), min_size=1, max_size=20),
       data=st.data())
def test_the_example_policy_compiled_equals_the_statement(compiled, calls, data):
    assert rulings(CompiledPolicy(EXAMPLE), calls, compiled, data) == [EXAMPLE.decide(*call) for call in calls]


@implementations
def test_the_example_cases(compiled):
    calls = [(tool, arguments, principal) for tool, arguments, principal, *_ in CASES]
    assert verdicts(CompiledPolicy(EXAMPLE), calls, compiled) == [verdict for *_, verdict, _ in CASES]


@settings(max_examples=500, deadline=None)
@given(pattern=GLOB_PATTERNS, texts=st.lists(st.text(alphabet="*?[]!-^\\abcx/.é\n", max_size=6), max_size=8))
def test_glob_translation_equals_fnmatch(pattern, texts):
    found = pc.match_substring_regex(pa.array(texts, pa.string()), glob_regex(pattern)).to_pylist()
    assert found == [fnmatch.fnmatchcase(text, pattern) for text in texts]


@implementations
def test_any_callable_is_asked_call_by_call(compiled):
    policy = compile_policy(lambda tool, arguments, principal: {"a": "allow", "d": "deny"}.get(tool, "maybe")
                            if arguments == {"n": 2 ** 64 + 1} else "unasked")
    assert isinstance(policy, PerCallPolicy)
    calls = [("a", {"n": 2 ** 64 + 1}, "p"), ("d", {"n": 2 ** 64 + 1}, "p"), ("x", {"n": 2 ** 64 + 1}, "p")]
    assert rulings(policy, calls, compiled) == [("allow", None), ("deny", None), (None, None)]
    assert isinstance(compile_policy(EXAMPLE), CompiledPolicy) and compile_policy(None) is None


def test_compiled_policy_pickles_as_its_document():
    copy = pickle.loads(pickle.dumps(CompiledPolicy(EXAMPLE)))
    assert copy.document == EXAMPLE
    calls = [(tool, arguments, principal) for tool, arguments, principal, *_ in CASES]
    assert verdicts(copy, calls) == [verdict for *_, verdict, _ in CASES]
