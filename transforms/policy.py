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

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from litmus_score.scoring import contract as c
from litmus_score.scoring.policy import (
    LIST_OPERATORS,
    MAX_SUBJECT_LENGTH,
    MISSING,
    PATTERN_OPERATORS,
    PolicyDocument,
    resolve_path,
)
from litmus_score.scoring.rules import canonical_json, parse_json_object
from transforms import jsontext
from transforms.columnar import encode
from transforms.jsontext import ABSENT, BOOL, LIST, NULL, NUMBER, OBJECT, STRING

FALSE, UNDECIDED, TRUE = np.int8(0), np.int8(1), np.int8(2)
# Ruling codes: no verdict, allow, deny.
RULINGS = (None, c.ALLOW, c.DENY)
_RULING_CODES = {verdict: code for code, verdict in enumerate(RULINGS)}

_KINDS = {type(None): NULL, bool: BOOL, int: NUMBER, float: NUMBER, str: STRING, list: LIST, dict: OBJECT}
# CompiledPolicy.decisions: no verdict, the principal check, the tool list, the default, then each rule.
_NO_DECISION, _BY_PRINCIPAL_CHECK, _BY_TOOL_LIST, _BY_DEFAULT, _FIRST_RULE = range(5)
# Integers a float64 holds exactly.
_EXACT_INTEGERS = 2 ** 53


def glob_regex(pattern: str) -> str:
    """An RE2 expression for the whole strings that fnmatch.fnmatchcase(text, pattern) accepts.

    Follows fnmatch's grammar: `*` any run, `?` one character, `[...]` a set
    (`[!...]` its complement, `]` first is a member, `a-z` ranges, a reversed
    range is empty), a `[` without its `]` is itself.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
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
    """The values one path resolves to, for some calls, sorted by kind: numpy
    and Arrow columns, and `value(i)`, the value itself, for what they cannot hold."""

    def __init__(self, kinds, numbers, truth, inexact, strings, value):
        self.kinds, self.numbers, self.truth = kinds, numbers, truth
        # Asked of the statement one at a time: what no column holds exactly.
        self.inexact = inexact
        # Each string value, null where none or not Unicode text (None: no string at all); its length in characters.
        self.strings = strings
        self.lengths = None if strings is None else np.asarray(pc.fill_null(pc.utf8_length(strings), 0), np.int64)
        self.value = value

    @classmethod
    def of(cls, values: list) -> Values:
        """The columns of parsed values (MISSING where the path does not resolve)."""
        kinds = np.fromiter((ABSENT if v is MISSING else _KINDS[type(v)] for v in values), np.int8, len(values))
        inexact = np.zeros(len(values), bool)
        numbers = np.full(len(values), np.nan)
        at = np.flatnonzero(kinds == NUMBER)
        if len(at):
            picked = [values[i] for i in at.tolist()]
            big = np.fromiter((type(v) is int and not -_EXACT_INTEGERS <= v <= _EXACT_INTEGERS for v in picked),
                              bool, len(picked))
            inexact[at[big]] = True
            numbers[at[~big]] = [v for v, b in zip(picked, big.tolist()) if not b]
        truth = kinds == BOOL
        if truth.any():
            where = np.flatnonzero(truth)
            truth[where] = [values[i] for i in where.tolist()]
        return cls(kinds, numbers, truth, inexact, _string_column(values, kinds, inexact), values.__getitem__)

    @classmethod
    def at(cls, subjects: list, path: tuple, objects: bool = False) -> Values:
        """The values at `path` in each subject (`objects`: every subject is a dict)."""
        if len(path) == 1 and objects:
            key = path[0]
            return cls.of([s.get(key, MISSING) for s in subjects])
        return cls.of([resolve_path(s, path) for s in subjects])


def _string_column(values: list, kinds: np.ndarray, inexact: np.ndarray):
    """Each string value as an Arrow column (None without any); a string UTF-8
    cannot hold (a lone surrogate) is null there and marked `inexact`."""
    where = np.flatnonzero(kinds == STRING)
    if not len(where):
        return None
    texts = [values[i] for i in where.tolist()]
    try:
        array = pa.array(texts, pa.string())
    except (UnicodeEncodeError, pa.ArrowException):
        odd = np.array([not _encodes(text) for text in texts], bool)
        inexact[where[odd]] = True
        array = pa.array([None if bad else text for text, bad in zip(texts, odd.tolist())], pa.string())
    if len(where) < len(values):
        array = pc.replace_with_mask(pa.nulls(len(values), pa.string()), pa.array(kinds == STRING), array)
    return array


class ParsedArguments:
    """Calls' resolved arguments as parsed dicts (the pure-Python path, which
    shares them with the JSON comparison)."""

    def __init__(self, objects: list):
        self._objects = objects

    def objects(self) -> list:
        return self._objects

    def columns(self, readers: dict) -> dict:
        """Path -> (Values of the calls `readers[path]` marks, each call's position among them)."""
        columns = {}
        for path, calls in readers.items():
            read = np.flatnonzero(calls)
            position = np.full(len(calls), -1)
            position[read] = np.arange(len(read))
            subjects = self._objects if len(read) == len(calls) else [self._objects[i] for i in read.tolist()]
            columns[path] = (Values.at(subjects, path, objects=True), position)
        return columns


class ArgumentTexts:
    """Calls' resolved arguments as JSON object texts (`texts` at `rows`),
    read by transforms.jsontext's compiled routines: no parsed objects but
    for the values no column holds."""

    def __init__(self, texts: pa.Array, rows: np.ndarray):
        self._texts, self._rows = texts, np.asarray(rows, np.int64)
        self._parsed: dict = {}
        # (path, the calls read) -> its columns: policies that read the same (a what-if's) share them.
        self._columns: dict = {}

    def objects(self) -> list:
        return jsontext.parse_objects(self._texts.take(pa.array(self._rows))) if len(self._rows) else []

    def columns(self, readers: dict) -> dict:
        keys = {path: (path, np.asarray(calls, bool).tobytes()) for path, calls in readers.items()}
        paths = [path for path, key in keys.items() if key not in self._columns]
        if paths:
            found = jsontext.extract(self._texts, self._rows, paths, np.array([readers[path] for path in paths], bool))
            every = np.arange(len(self._rows))
            for i, path in enumerate(paths):
                self._columns[keys[path]] = (Values(found["kinds"][i], found["numbers"][i], found["truth"][i],
                                                    found["inexact"][i], found["strings"][i],
                                                    functools.partial(_value, self._texts, self._rows,
                                                                      self._parsed, path)), every)
        return {path: self._columns[key] for path, key in keys.items()}


def _value(texts: pa.Array, rows: np.ndarray, parsed: dict, path: tuple, i: int):
    """The value at `path` in the text of call `i`, parsed once (into `parsed`).
    Not a method of ArgumentTexts: its columns would hold it in a cycle, which
    only the garbage collector frees, and a batch's columns would outlive it."""
    if i not in parsed:
        parsed[i] = parse_json_object(texts[int(rows[i])].as_py())
    return resolve_path(parsed[i], path)


class View:
    """Some of the rows (`at`, None for all) of a Values."""

    def __init__(self, values: Values, at: np.ndarray | None = None):
        self.source, self.at = values, at
        pick = (lambda column: column) if at is None else (lambda column: column[at])
        self.kinds, self.numbers, self.truth = pick(values.kinds), pick(values.numbers), pick(values.truth)
        self.inexact = pick(values.inexact)
        self.lengths = None if values.lengths is None else pick(values.lengths)
        self.strings = values.strings
        if values.strings is not None and at is not None:
            self.strings = values.strings.take(pa.array(at))

    def value(self, i: int):
        return self.source.value(i if self.at is None else int(self.at[i]))


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _mask(array) -> np.ndarray:
    return np.asarray(pc.fill_null(array, False), bool)


_COMPARE = {"gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal}


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
            scalars = {form for form in expected if form[0] in ("string", "number", "bool", "null")}
            self.strings = pa.array(sorted(form[1] for form in scalars if form[0] == "string" and _encodes(form[1])),
                                    pa.string())
            self.numbers = np.array([form[1] for form in scalars if form[0] == "number" and _float_exact(form[1])],
                                    float)
            self.booleans = [form[1] for form in scalars if form[0] == "bool"]
            self.null = ("null",) in scalars
            self.containers = any(form[0] in ("array", "object") for form in expected)

    def evaluate(self, subjects: list) -> np.ndarray:
        """The condition's result (FALSE, UNDECIDED, TRUE) for each subject."""
        return self.decide(View(Values.at(subjects, self.path)))

    def decide(self, view: View) -> np.ndarray:
        """The result for each value of `view` (values of this condition's path)."""
        result, inexact = self._decide(view)
        inexact = np.flatnonzero(inexact | view.inexact)
        if len(inexact):
            result[inexact] = [_code(self.condition.holds(view.value(i))) for i in inexact.tolist()]
        return result

    def _decide(self, view: View) -> tuple:
        """(result, values to ask the statement instead) on the columns of `view`."""
        kinds, name = view.kinds, self.operator
        result, inexact = np.zeros(len(kinds), np.int8), np.zeros(len(kinds), bool)
        if name == "exists":
            result[(kinds != ABSENT) == self.condition.exists] = TRUE
        elif name in ("equals", "not_equals", "in", "not_in"):
            equal = (kinds == NUMBER) & np.isin(view.numbers, self.numbers)
            if view.strings is not None and len(self.strings):
                equal |= _mask(pc.is_in(view.strings, value_set=self.strings))
            for boolean in self.booleans:
                equal |= (kinds == BOOL) & (view.truth == boolean)
            if self.null:
                equal |= kinds == NULL
            holds = equal if name in ("equals", "in") else ~equal
            result[holds & (kinds != ABSENT)] = TRUE
            if self.containers:  # a list or an object equal to an expected one: the statement compares those
                inexact = (kinds == LIST) | (kinds == OBJECT)
        elif name in PATTERN_OPERATORS:
            if view.strings is None:
                return result, inexact
            if self.pattern is None:
                return result, kinds == STRING
            found = _mask(pc.match_substring_regex(view.strings, self.pattern))
            text = (kinds == STRING) & ~view.inexact
            result[text & (found != name.startswith("not_"))] = TRUE
            assert view.lengths is not None  # a view has lengths where it has strings
            result[text & (view.lengths > MAX_SUBJECT_LENGTH)] = UNDECIDED
        elif name in LIST_OPERATORS:
            lists = np.flatnonzero(kinds == LIST)
            if len(lists):
                result[lists] = self._per_list([view.value(i) for i in lists.tolist()])
        else:
            with np.errstate(invalid="ignore"):
                result[(kinds == NUMBER) & _COMPARE[name](view.numbers, self.condition.operand)] = TRUE
        return result, inexact

    def _per_list(self, lists: list) -> np.ndarray:
        """`any` or `all` of the inner condition over each list's elements."""
        sizes = np.fromiter((len(items) for items in lists), np.int64, len(lists))
        assert self.inner is not None  # a list operator's condition has its inner one
        inner = self.inner.evaluate([item for items in lists for item in items])
        filled = sizes > 0
        result = np.full(len(lists), FALSE if self.operator == "any" else TRUE, np.int8)
        if filled.any():
            starts = (np.cumsum(sizes) - sizes)[filled]
            result[filled] = (np.maximum if self.operator == "any" else np.minimum).reduceat(inner, starts)
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
        # What rulings() codes stand for: (verdict, decided_by), as PolicyDocument.decide gives them.
        default = (document.default, c.BY_DEFAULT) if document.default is not None else (None, None)
        self.decisions = ((None, None), (c.DENY, c.BY_PRINCIPAL_CHECK), (c.ALLOW, c.BY_TOOL_LIST), default,
                          *((c.DENY, rule.id) for rule in document.rules))
        # Tool or principal -> which rules apply (the principal's: and whether it is allowed), learnt per name.
        self._by_tool: dict = {}
        self._by_principal: dict = {}

    def __reduce__(self):
        return CompiledPolicy, (self.document,)

    def _tool_row(self, tool) -> np.ndarray:
        if tool not in self._by_tool:
            self._by_tool[tool] = np.array([rule.tool_matches(tool) for rule, _ in self._rules], bool)
        return self._by_tool[tool]

    def _principal_row(self, principal) -> np.ndarray:
        if principal not in self._by_principal:
            allowed = self.document.principal_allowed(principal)
            self._by_principal[principal] = np.array(
                [allowed and rule.principal_matches(principal) for rule, _ in self._rules] + [allowed], bool)
        return self._by_principal[principal]

    def rulings(self, tools: pa.Array, principals: pa.Array, arguments) -> np.ndarray:
        """The policy's decision for each call (an index into self.decisions), given
        its tool, principal and resolved arguments (a JSON object, always): a
        list of parsed dicts, ParsedArguments or ArgumentTexts."""
        document = self.document
        if isinstance(arguments, list):
            arguments = ParsedArguments(arguments)
        tool_codes, tool_names = encode(tools)
        principal_codes, principal_names = encode(principals)
        by_principal = np.array([self._principal_row(p) for p in principal_names], bool).reshape(
            len(principal_names), len(self._rules) + 1)[principal_codes]
        allowed = by_principal[:, -1]
        # Rule r applies to call i: applies[r, i].
        applies = (np.array([self._tool_row(t) for t in tool_names], bool).reshape(
            len(tool_names), len(self._rules))[tool_codes] & by_principal[:, :-1]).T
        # Each path is read once, for every call some rule reading it applies to.
        readers: dict = {}
        for (_, conditions), calls in zip(self._rules, applies):
            for condition in conditions:
                readers[condition.path] = readers.get(condition.path, False) | calls
        columns = arguments.columns(readers) if readers else {}
        state = np.where(allowed, FALSE, TRUE).astype(np.int8)
        # The first rule (in the file's order) that matches a call denies it, as in the statement.
        decided = np.where(allowed, _NO_DECISION, _BY_PRINCIPAL_CHECK).astype(np.int32)
        for index, ((_, conditions), calls) in enumerate(zip(self._rules, applies)):
            open_calls = np.flatnonzero(calls & (state < TRUE))
            matched = np.full(len(open_calls), TRUE, np.int8)
            for condition in conditions:
                live = np.flatnonzero(matched > FALSE)
                if not len(live):
                    break
                values, position = columns[condition.path]
                at = position[open_calls[live]]
                view = View(values, None if len(at) == len(values.kinds) else at)
                matched[live] = np.minimum(matched[live], condition.decide(view))
            state[open_calls] = np.maximum(state[open_calls], matched)
            decided[open_calls[matched == TRUE]] = _FIRST_RULE + index
        named = np.array([document.names_tool(t) for t in tool_names], bool)[tool_codes]
        undenied = np.where(named, _BY_TOOL_LIST, _BY_DEFAULT)
        return np.select([state == TRUE, state == UNDECIDED], [decided, _NO_DECISION], undenied).astype(np.int32)


class PerCallPolicy:
    """Any litmus_score.scoring.rules.Policy callable, asked call by call, with the batch interface."""

    # A bare callable gives a verdict and names nothing that decided it.
    decisions = tuple((verdict, None) for verdict in RULINGS)

    def __init__(self, policy):
        self.policy = policy

    def rulings(self, tools: pa.Array, principals: pa.Array, arguments) -> np.ndarray:
        objects = arguments if isinstance(arguments, list) else arguments.objects()
        asked = zip(tools.to_pylist(), objects, principals.to_pylist())
        return np.fromiter((_ruling_code(self.policy(*call)) for call in asked), np.int32, len(objects))


def _ruling_code(ruling) -> int:
    return _RULING_CODES[ruling] if ruling in c.VERDICTS else 0


def compile_policy(policy):
    """The batch form of a policy: compiled for a PolicyDocument, call by call for any other callable."""
    if policy is None or isinstance(policy, (CompiledPolicy, PerCallPolicy)):
        return policy
    return CompiledPolicy(policy) if isinstance(policy, PolicyDocument) else PerCallPolicy(policy)
