"""The policy of litmus_score.scoring.policy, compiled to judge whole batches.

The statement asks every rule of every call in Python (about 36 µs a call
and context). Compiled, a batch costs a few vectorized steps per rule:

- tool and principal tests are asked of each distinct tool and principal
  of the batch (by the statement itself) and spread to the calls by their
  dictionary codes;
- each condition reads its argument for the calls its rule applies to (the
  arguments are parsed once, by context resolution, and shared with the
  JSON comparison), sorts the values by kind and decides each kind on whole
  columns: strings with Arrow's RE2 kernels (glob patterns translated to
  RE2), numbers and membership with numpy, `any` and `all` on the flattened
  elements of the lists;
- a value no column can hold exactly (an integer beyond 2**53, a string
  with a lone surrogate, a list or object to compare as a value) is asked
  of the statement's own condition, one value at a time.

Results are three-valued (FALSE < UNDECIDED < TRUE), so a rule's conditions
combine by minimum and rules by maximum, as the statement combines them.
tests/test_policy_compiled.py holds the compiled policy equal to the
statement, operator by operator.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litmus_score.scoring import contract as c
from litmus_score.scoring.policy import (
    LIST_OPERATORS,
    MAX_SUBJECT_LENGTH,
    MISSING,
    PolicyDocument,
    canonical_json,
    resolve_path,
)
from transforms.columnar import encode

FALSE, UNDECIDED, TRUE = np.int8(0), np.int8(1), np.int8(2)
# Ruling codes: no verdict, allow, deny.
RULINGS = (None, c.ALLOW, c.DENY)
_RULING_CODES = {verdict: code for code, verdict in enumerate(RULINGS)}

ABSENT, NULL, BOOL, NUMBER, STRING, LIST, OBJECT = range(7)
_KINDS = {type(None): NULL, bool: BOOL, int: NUMBER, float: NUMBER, str: STRING, list: LIST, dict: OBJECT}
# Integers a float64 holds exactly.
_EXACT_INTEGERS = 2 ** 53


def glob_regex(pattern: str) -> str:
    """An RE2 expression for the whole strings that fnmatch.fnmatchcase(text, pattern) accepts.

    Follows fnmatch's grammar: `*` any run, `?` one character, `[...]` a set
    (`[!...]` its complement, `]` first is a member, `a-z` ranges, a reversed
    range is empty), a `[` without its `]` is itself.
    """
    out, i, n = [], 0, len(pattern)
    while i < n:
        char = pattern[i]
        i += 1
        if char == "*":
            if not out or out[-1] != ".*":
                out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[":
            j = i + (i < n and pattern[i] == "!")
            j += j < n and pattern[j] == "]"
            end = pattern.find("]", j)
            if end < 0:
                out.append(r"\[")
                continue
            out.append(_glob_set(pattern[i:end]))
            i = end + 1
        else:
            out.append(_literal(char))
    return r"(?s)\A" + "".join(out) + r"\z"


def _literal(char: str) -> str:
    """`char` as an RE2 literal, in a set or outside one."""
    return char if char.isalnum() else f"\\x{{{ord(char):x}}}"


def _glob_set(body: str) -> str:
    """The RE2 class of a glob set's body (between `[` and `]`), as fnmatch reads it."""
    negated = body.startswith("!")
    members = body[1:] if negated else body
    if not members:
        return "." if negated else r"[^\x00-\x{10FFFF}]"
    # fnmatch: a `-` between two characters makes a range (the first `-` of
    # a run after the set's first character; a trailing `-` is itself);
    # ranges whose ends are reversed are empty.
    ranges, k = [], 0
    while k < len(members):
        if k + 2 < len(members) and members[k + 1] == "-":
            ranges.append((members[k], members[k + 2]))
            k += 3
        else:
            ranges.append((members[k], members[k]))
            k += 1
    parts = [_literal(low) + ("" if low == high else "-" + _literal(high))
             for low, high in ranges if low <= high]
    if not parts:
        return "." if negated else r"[^\x00-\x{10FFFF}]"
    return "[" + ("^" if negated else "") + "".join(parts) + "]"


class Values:
    """The values one path resolves to, for a list of subjects, sorted by kind."""

    def __init__(self, values: list):
        self.values = values
        self.kinds = np.fromiter((ABSENT if v is MISSING else _KINDS[type(v)] for v in values), np.int8, len(values))
        # Asked of the statement one at a time: what no column holds exactly.
        self.inexact = np.zeros(len(values), bool)
        numbers = np.flatnonzero(self.kinds == NUMBER)
        self.numbers = np.full(len(values), np.nan)
        if len(numbers):
            picked = [values[i] for i in numbers.tolist()]
            big = np.fromiter((type(v) is int and not -_EXACT_INTEGERS <= v <= _EXACT_INTEGERS for v in picked),
                              bool, len(picked))
            self.inexact[numbers[big]] = True
            self.numbers[numbers[~big]] = [v for v, b in zip(picked, big.tolist()) if not b]
        self.truth = self.kinds == BOOL
        if self.truth.any():
            where = np.flatnonzero(self.truth)
            self.truth[where] = [values[i] for i in where.tolist()]
        self._strings = None

    @classmethod
    def at(cls, subjects: list, path: tuple) -> "Values":
        if len(path) == 1 and all(type(s) is dict for s in subjects):
            key = path[0]
            return cls([s.get(key, MISSING) for s in subjects])
        return cls([resolve_path(s, path) for s in subjects])

    def strings(self) -> tuple:
        """(string per value, null where none or not Unicode text; lengths in characters)."""
        if self._strings is None:
            where = np.flatnonzero(self.kinds == STRING)
            texts = [self.values[i] for i in where.tolist()]
            try:
                array = pa.array(texts, pa.string())
            except (UnicodeEncodeError, pa.ArrowException):  # a lone surrogate: UTF-8 cannot hold it
                odd = np.array([not _encodes(text) for text in texts], bool)
                self.inexact[where[odd]] = True
                array = pa.array([None if bad else text for text, bad in zip(texts, odd.tolist())], pa.string())
            full = pa.nulls(len(self.values), pa.string())
            if len(where):
                full = pc.replace_with_mask(full, pa.array(self.kinds == STRING), array)
            lengths = np.asarray(pc.fill_null(pc.utf8_length(full), 0), np.int64)
            self._strings = (full, lengths)
        return self._strings


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _mask(array) -> np.ndarray:
    return np.asarray(pc.fill_null(array, False), bool)


class _CompiledCondition:
    """One condition of the statement, decided on columns of values."""

    def __init__(self, condition):
        self.condition = condition
        self.operator, self.path, operand = condition.operator, condition.path, condition.operand
        self.inner = _CompiledCondition(operand) if self.operator in LIST_OPERATORS else None
        self.pattern = None
        if self.operator in ("regex", "not_regex"):
            self.pattern = operand
        elif self.operator in ("glob", "not_glob"):
            self.pattern = glob_regex(operand)
        if self.pattern is not None and not _arrow_runs(self.pattern):
            self.pattern = None  # asked of the statement, value by value
        if self.operator in ("equals", "not_equals", "in", "not_in"):
            expected = [canonical_json(operand)] if self.operator in ("equals", "not_equals") else {
                canonical_json(item) for item in operand}
            self.expected = set(expected)
            scalars = {form for form in self.expected if form[0] in ("string", "number", "bool", "null")}
            self.strings = pa.array(sorted(form[1] for form in scalars if form[0] == "string" and _encodes(form[1])),
                                    pa.string())
            self.numbers = np.array([form[1] for form in scalars if form[0] == "number" and _float_exact(form[1])],
                                    float)
            self.booleans = [form[1] for form in scalars if form[0] == "bool"]
            self.null = ("null",) in scalars
            self.containers = any(form[0] in ("array", "object") for form in self.expected)

    def evaluate(self, subjects: list) -> np.ndarray:
        """The condition's result (FALSE, UNDECIDED, TRUE) for each subject."""
        values = Values.at(subjects, self.path)
        result = self._decide(values)
        inexact = np.flatnonzero(values.inexact)
        if len(inexact):
            result[inexact] = [_code(self.condition.holds(values.values[i])) for i in inexact.tolist()]
        return result

    def _decide(self, values: Values) -> np.ndarray:
        kinds, name = values.kinds, self.operator
        result = np.zeros(len(kinds), np.int8)
        if name == "exists":
            result[(kinds != ABSENT) == self.condition.exists] = TRUE
            return result
        if name in ("equals", "not_equals", "in", "not_in"):
            equal = np.zeros(len(kinds), bool)
            strings, _ = values.strings() if (kinds == STRING).any() else (None, None)
            if strings is not None and len(self.strings):
                equal |= _mask(pc.is_in(strings, value_set=self.strings))
            equal |= (kinds == NUMBER) & np.isin(values.numbers, self.numbers)
            for boolean in self.booleans:
                equal |= (kinds == BOOL) & (values.truth == boolean)
            if self.null:
                equal |= kinds == NULL
            holds = equal if name in ("equals", "in") else ~equal
            result[holds & (kinds != ABSENT)] = TRUE
            if self.containers:  # a list or an object equal to an expected one: the statement compares those
                values.inexact |= np.isin(kinds, (LIST, OBJECT))
            return result
        if name in ("glob", "not_glob", "regex", "not_regex"):
            if not (kinds == STRING).any():
                return result
            strings, lengths = values.strings()
            if self.pattern is None:
                values.inexact |= kinds == STRING
                return result
            found = _mask(pc.match_substring_regex(strings, self.pattern))
            text = ~strings.is_null().to_numpy(zero_copy_only=False)
            holds = found if not name.startswith("not_") else ~found
            result[text & holds] = TRUE
            result[text & (lengths > MAX_SUBJECT_LENGTH)] = UNDECIDED
            return result
        if name in LIST_OPERATORS:
            lists = np.flatnonzero(kinds == LIST)
            if not len(lists):
                return result
            elements = [values.values[i] for i in lists.tolist()]
            sizes = np.fromiter((len(e) for e in elements), np.int64, len(elements))
            inner = self.inner.evaluate([item for element in elements for item in element])
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            filled = sizes > 0
            reduce = np.maximum if name == "any" else np.minimum
            per_list = np.full(len(lists), FALSE if name == "any" else TRUE, np.int8)
            if filled.any():
                per_list[filled] = reduce.reduceat(inner, starts[filled])
            result[lists] = per_list
            return result
        numbers = kinds == NUMBER
        compare = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal}[name]
        with np.errstate(invalid="ignore"):
            result[numbers & compare(values.numbers, self.condition.operand)] = TRUE
        return result


def _float_exact(number) -> bool:
    """Whether float64 holds the number exactly (so numpy compares it as Python does)."""
    try:
        return float(number) == number
    except OverflowError:
        return False


def _arrow_runs(pattern: str) -> bool:
    try:
        pc.match_substring_regex(pa.array([""], pa.string()), pattern)
    except (pa.ArrowException, UnicodeEncodeError):
        return False
    return True


def _code(holds) -> np.int8:
    return UNDECIDED if holds is None else (TRUE if holds else FALSE)


class CompiledPolicy:
    """A PolicyDocument that judges a batch of calls at once; pickles as its document."""

    def __init__(self, document: PolicyDocument):
        self.document = document
        self._rules = [(rule, [_CompiledCondition(condition) for condition in rule.when]) for rule in document.rules]

    def __reduce__(self):
        return CompiledPolicy, (self.document,)

    def rulings(self, tools: pa.Array, principals: pa.Array, arguments: list) -> np.ndarray:
        """The policy's ruling code (index into RULINGS) for each call, given
        its tool, principal and parsed resolved arguments (a dict)."""
        document, n = self.document, len(arguments)
        tool_codes, tool_names = encode(tools)
        principal_codes, principal_names = encode(principals)
        allowed = np.array([document.principal_allowed(p) for p in principal_names], bool)[principal_codes]
        state = np.where(allowed, FALSE, TRUE).astype(np.int8)
        for rule, conditions in self._rules:
            applies = (np.array([rule.tool_matches(t) for t in tool_names], bool)[tool_codes]
                       & np.array([rule.principal_matches(p) for p in principal_names], bool)[principal_codes])
            open_calls = np.flatnonzero(applies & (state < TRUE))
            matched = np.full(len(open_calls), TRUE, np.int8)
            for condition in conditions:
                live = np.flatnonzero(matched > FALSE)
                if not len(live):
                    break
                subjects = [arguments[i] for i in open_calls[live].tolist()]
                matched[live] = np.minimum(matched[live], condition.evaluate(subjects))
            state[open_calls] = np.maximum(state[open_calls], matched)
        undenied = np.array([_RULING_CODES[document.undenied(t)] for t in tool_names], np.int8)[tool_codes]
        return np.select([state == TRUE, state == UNDECIDED], [_RULING_CODES[c.DENY], 0], undenied).astype(np.int8)


class PerCallPolicy:
    """Any litmus_score.scoring.rules.Policy callable, asked call by call, with the batch interface."""

    def __init__(self, policy):
        self.policy = policy

    def rulings(self, tools: pa.Array, principals: pa.Array, arguments: list) -> np.ndarray:
        asked = zip(tools.to_pylist(), arguments, principals.to_pylist())
        return np.fromiter((_ruling_code(self.policy(*call)) for call in asked), np.int8, len(arguments))


def _ruling_code(ruling) -> int:
    return _RULING_CODES[ruling] if ruling in c.VERDICTS else 0


def compile_policy(policy):
    """The batch form of a policy: compiled for a PolicyDocument, call by call for any other callable."""
    if policy is None or isinstance(policy, (CompiledPolicy, PerCallPolicy)):
        return policy
    return CompiledPolicy(policy) if isinstance(policy, PolicyDocument) else PerCallPolicy(policy)
