"""Policy files: the verdict for calls whose harness recorded none.

scoring-v1 takes a context's recorded `policy_verdict`; where it is null, the
configured policy decides for (tool, resolved_arguments, principal). This
module loads such a policy from YAML and evaluates it. It is pure: no Beam,
no pyarrow, so the reference rules and the pipeline share it.

Format (`configs/policy.yaml` is a commented example)::

    schema: litmus-policy/1      # required
    default: null                # allow | deny | null: the verdict for a tool the policy does not name
    allowed_principals: [agent]  # optional: a call by any other principal is denied, whatever the tool
    tools: [transfer_funds]      # tool names the policy knows (no globs)
    rules:
      - id: transfer-over-limit  # unique; letters, digits, . _ : -
        description: ...         # optional
        tool: transfer_funds     # optional: a name, or a glob (* ? [...]); absent = any tool
        when:                    # optional: every condition must hold
          - {arg: amount, gt: 10000}
        principal: {not_in: [treasury]}  # optional: {in: [...]} or {not_in: [...]}
        effect: deny             # required; the only effect

A condition names an argument and exactly one operator. `arg` is a dotted
path into the resolved arguments (`filter.id` is arguments["filter"]["id"]);
a key that itself holds a dot cannot be reached, and a path through
anything but an object does not resolve. Operators:

- `exists: true|false`: whether the path resolves (to any value, null too);
- `equals`, `not_equals`, `in`, `not_in`: JSON values compared as values:
  key order does not count, 1 == 1.0, but a boolean never equals a number;
- `glob` / `not_glob`: the value is a string and the whole string matches /
  does not match an fnmatch pattern, case-sensitive, where `*` also crosses `/`;
- `regex` / `not_regex`: the value is a string and an RE2 search finds /
  does not find the pattern (unanchored: write ^ and $ to anchor);
- `gt`, `ge`, `lt`, `le`: against a number; booleans are not numbers;
- `any` / `all`: the value is a list and some / every element satisfies an
  inner condition: a condition whose `arg`, when given, is a path into the
  element, and is the element itself when left out
  (`{arg: recipients, any: {not_glob: '*@example.com'}}`). `all` holds for
  an empty list; inner conditions may nest.

An argument that does not resolve satisfies only `exists: false`. A value of
the wrong kind (a string for `gt`, a number for `regex` or `not_regex`, an
object for `any`) does not match.

Patterns are RE2's dialect (https://github.com/google/re2/wiki/Syntax),
matched in time linear in the string: no backreferences, no lookaround
(`(?!...)`, `(?=...)`), `\\A`, `\\z` but no `\\Z`; `\\s`, `\\w`, `\\d` and `\\b` are
ASCII (write `\\pL`, `\\p{Zs}` for Unicode classes). A pattern RE2 will not
compile is refused when the file is loaded. Patterns (regex, glob, tool
globs, arg paths) are at most 256 characters. A string over 4096
characters, or one that is not Unicode text (a lone surrogate escape such
as `"\\ud800"`), is not matched by any pattern operator but leaves its rule
undecided; the bound keeps each call's work small whatever the arguments.
In `any` and `all`, an undecided element decides only where no other
element does: `any` holds if some element satisfies the inner condition,
else it is undecided if some element is, else it fails (`all` the other
way round).

Verdict for a call, in order:
1. `deny` when `allowed_principals` is set and the principal is not in it;
2. `deny` when some rule matches: its tool, principal and every condition;
3. None (no verdict: the call is unscored with no_verdict) when some rule
   could not be decided: a silent allow would be an under-penalty;
4. `allow` when the policy names the tool (in `tools`, or as some rule's
   exact, non-glob tool);
5. else `default` (None when not declared).

`load_policy` reads a file of at most 1 MiB with a safe YAML loader that also
refuses duplicate keys and aliases, and validates it with pydantic (unknown
fields are errors, types are strict). Any fault but I/O (OSError) raises
PolicyError: one line naming the file, the rule (index and id) and the field.
The loaded PolicyDocument is the policy: callable as litmus_score.scoring.rules.Policy,
picklable for Beam workers, with `.sha256` over its canonical form (the
validated model as JSON, sorted keys, compact separators), so YAML comments,
layout and key order do not change it and every change of content does,
descriptions included. A run stores that canonical form as policy.json;
`policy_diff` says how two such stored policies differ, rule by rule.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import operator
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args

import re2
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    JsonValue,
    PrivateAttr,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from litmus_score.scoring import configfile
from litmus_score.scoring import contract as c
from litmus_score.scoring.rules import canonical_json

# The schema name a policy file gives: a Literal takes no variable, so the constant reads it back.
PolicySchema = Literal["litmus-policy/1"]
POLICY_SCHEMA: str = get_args(PolicySchema)[0]
MAX_POLICY_BYTES = 1024 * 1024
MAX_PATTERN_LENGTH = 256
# Long enough for a path, an address or an SQL statement; beyond it a pattern
# leaves its rule undecided (RE2 would run, but the verdicts of a policy file
# stay what they were before RE2, and fnmatch's globs stay cheap).
MAX_SUBJECT_LENGTH = 4096
PRINCIPAL_NOT_ALLOWED = c.BY_PRINCIPAL_CHECK

_COMPARISONS = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}
PATTERN_OPERATORS = ("glob", "not_glob", "regex", "not_regex")
LIST_OPERATORS = ("any", "all")
# Operator name (as written in the file) -> model field name.
_OPERATOR_FIELDS = {
    "equals": "equals", "not_equals": "not_equals", "in": "in_", "not_in": "not_in",
    **{name: name for name in PATTERN_OPERATORS}, "exists": "exists", **{name: name for name in _COMPARISONS},
    "any": "any_", "all": "all_",
}
_GLOB_CHARACTERS = re.compile(r"[*?\[]")
# What a path that does not resolve gives (null is a value).
MISSING = object()
# Errors are raised (and named in the file's one-line error), not logged to stderr.
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False

RuleId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")]
ToolName = Annotated[str, StringConstraints(min_length=1, pattern=r"^[^*?\[]+$")]
ToolPattern = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATTERN_LENGTH)]
ArgPath = Annotated[str, StringConstraints(pattern=r"^[^.]+(\.[^.]+)*$", max_length=MAX_PATTERN_LENGTH)]
PatternText = Annotated[str, StringConstraints(max_length=MAX_PATTERN_LENGTH)]
Principal = Annotated[str, StringConstraints(min_length=1)]


class PolicyError(ValueError):
    """A policy file that cannot be used; the message is one line."""


def _fail(message: str) -> PydanticCustomError:
    # Passed as context, so braces in user text are not read as a template.
    return PydanticCustomError("policy", "{message}", {"message": message})


class Regex:
    """An RE2 program, compared and pickled as its pattern; PolicyError (naming
    RE2's reason) for a pattern RE2 will not run."""

    __slots__ = ("_program", "pattern")

    def __init__(self, pattern: str):
        try:
            program = re2.compile(pattern, _RE2_OPTIONS)
        except re2.error as error:
            reason = error.args[0] if error.args else error
            raise PolicyError(reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)) from None
        self.pattern, self._program = pattern, program

    def finds(self, text: str) -> bool:
        """Whether an unanchored search finds the pattern in `text` (Unicode text, no lone surrogate)."""
        return self._program.search(text) is not None

    def __eq__(self, other):
        return isinstance(other, Regex) and other.pattern == self.pattern

    def __hash__(self):
        return hash(self.pattern)

    def __reduce__(self):
        return Regex, (self.pattern,)


def glob_matches(pattern: str, text: str) -> bool:
    """fnmatch, case-sensitive on every platform; `*` also crosses `/`."""
    return fnmatch.fnmatchcase(text, pattern)


def pattern_subject(value: str) -> bool:
    """Whether a pattern may decide on `value`: at most MAX_SUBJECT_LENGTH
    characters and Unicode text (no lone surrogate, which UTF-8 cannot hold)."""
    if len(value) > MAX_SUBJECT_LENGTH:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def resolve_path(subject, path: tuple):
    """The value at `path` (a tuple of keys) inside `subject`, or MISSING;
    the empty path is the subject itself."""
    value = subject
    for key in path:
        value = value.get(key, MISSING) if isinstance(value, dict) else MISSING
        if value is MISSING:
            break
    return value


class _Model(BaseModel):
    # strict: "10" is not a number and "yes" not a boolean; frozen: the hash
    # computed at load time stays the hash of the content.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ElementCondition(_Model):
    """One operator on a value: a list element itself, or the value at `arg` inside it."""

    arg: ArgPath | None = None
    equals: JsonValue = None
    not_equals: JsonValue = None
    in_: list[JsonValue] | None = Field(None, alias="in")
    not_in: list[JsonValue] | None = None
    glob: PatternText | None = None
    not_glob: PatternText | None = None
    regex: PatternText | None = None
    not_regex: PatternText | None = None
    gt: FiniteFloat | None = None
    ge: FiniteFloat | None = None
    lt: FiniteFloat | None = None
    le: FiniteFloat | None = None
    exists: bool | None = None
    any_: ElementCondition | None = Field(None, alias="any")
    all_: ElementCondition | None = Field(None, alias="all")

    _operator: str = PrivateAttr()
    _path: tuple = PrivateAttr()
    _expected: Any = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _known_operators(cls, data):
        # Named here, with the valid ones, rather than as pydantic's "Extra inputs are not permitted".
        unknown = [key for key in data if key not in ("arg", *_OPERATOR_FIELDS)] if isinstance(data, dict) else []
        if unknown:
            raise _fail(f"unknown operator {', '.join(map(repr, unknown))}; a condition takes arg and one of "
                        f"{', '.join(_OPERATOR_FIELDS)}")
        return data

    @field_validator("regex", "not_regex")
    @classmethod
    def _compiles(cls, pattern):
        if pattern is not None:
            try:
                Regex(pattern)
            except PolicyError as error:
                raise _fail(f"invalid regex (RE2): {error}") from error
        return pattern

    @model_validator(mode="after")
    def _one_operator(self):
        # Which operator is given comes from the fields set, since
        # `equals: null` is a real operand.
        given = [name for name, field in _OPERATOR_FIELDS.items() if field in self.model_fields_set]
        if len(given) != 1:
            raise _fail(
                f"a condition needs exactly one operator ({', '.join(_OPERATOR_FIELDS)}), "
                f"got {', '.join(given) or 'none'}"
            )
        (name,) = given
        value = getattr(self, _OPERATOR_FIELDS[name])
        if name in ("equals", "not_equals"):
            expected = canonical_json(value)
        elif name in ("in", "not_in"):
            expected = frozenset(canonical_json(item) for item in value)
        elif name in ("regex", "not_regex"):
            expected = Regex(value)
        else:
            expected = value
        path = () if self.arg is None else tuple(self.arg.split("."))
        self._operator, self._path, self._expected = name, path, expected
        return self

    @model_serializer
    def _canonical(self):
        # Only the operator given: an unset `equals` and `equals: null` differ.
        operand = getattr(self, _OPERATOR_FIELDS[self._operator])
        if self._operator in LIST_OPERATORS:
            operand = operand._canonical()
        return ({} if self.arg is None else {"arg": self.arg}) | {self._operator: operand}

    @property
    def operator(self) -> str:
        return self._operator

    @property
    def path(self) -> tuple:
        """The keys of `arg`; empty for an element itself."""
        return self._path

    @property
    def operand(self):
        """The operator's value as written (a condition for any and all)."""
        return getattr(self, _OPERATOR_FIELDS[self._operator])

    def test(self, subject) -> bool | None:
        """Whether the condition holds for `subject` (the arguments, or a list
        element); None when a pattern could not decide (see pattern_subject)."""
        return self.holds(resolve_path(subject, self._path))

    def holds(self, value) -> bool | None:
        """The operator on the value `arg` resolved to (MISSING if it did not)."""
        name = self._operator
        if name == "exists":
            return (value is not MISSING) == self.exists
        if value is MISSING:
            return False
        if name in ("equals", "not_equals"):
            return (canonical_json(value) == self._expected) == (name == "equals")
        if name in ("in", "not_in"):
            return (canonical_json(value) in self._expected) == (name == "in")
        if name in PATTERN_OPERATORS:
            if not isinstance(value, str):
                return False
            if not pattern_subject(value):
                return None
            if name in ("glob", "not_glob"):
                found = glob_matches(self._expected, value)
            else:
                found = self._expected.finds(value)
            return found != name.startswith("not_")
        if name in LIST_OPERATORS:
            if not isinstance(value, list):
                return False
            results = {self._expected.test(element) for element in value}
            decisive, other = (True, False) if name == "any" else (False, True)
            return decisive if decisive in results else (None if None in results else other)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return _COMPARISONS[name](value, self._expected)


class Condition(ElementCondition):
    """One argument (`arg`, required) and one operator."""

    arg: ArgPath


class PrincipalCondition(_Model):
    """`{in: [...]}` or `{not_in: [...]}` on the acting principal."""

    in_: list[Principal] | None = Field(None, alias="in")
    not_in: list[Principal] | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_operators(cls, data):
        unknown = [key for key in data if key not in ("in", "not_in")] if isinstance(data, dict) else []
        if unknown:
            raise _fail(f"unknown operator {', '.join(map(repr, unknown))}; a principal condition takes in or not_in")
        return data

    @model_validator(mode="after")
    def _one_operator(self):
        if (self.in_ is None) == (self.not_in is None):
            raise _fail("give exactly one of in, not_in")
        return self

    def test(self, principal: str) -> bool:
        if self.in_ is not None:
            return principal in self.in_
        assert self.not_in is not None  # _one_operator: exactly one of in, not_in is given
        return principal not in self.not_in


class Rule(_Model):
    """A deny rule: tool, principal and every condition must match."""

    id: RuleId
    description: str | None = None
    tool: ToolPattern | None = None
    when: list[Condition] = []
    principal: PrincipalCondition | None = None
    effect: Literal["deny"]

    @model_validator(mode="after")
    def _constrained(self):
        if self.tool is None and not self.when and self.principal is None:
            raise _fail("a rule needs a tool, a when or a principal; this one would deny every call")
        return self

    @property
    def is_glob(self) -> bool:
        return self.tool is not None and _GLOB_CHARACTERS.search(self.tool) is not None

    def tool_matches(self, tool) -> bool:
        if self.tool is not None and self.is_glob:
            return isinstance(tool, str) and glob_matches(self.tool, tool)
        return self.tool is None or tool == self.tool

    def principal_matches(self, principal) -> bool:
        return self.principal is None or self.principal.test(principal)

    def test(self, tool: str, arguments: dict, principal: str) -> bool | None:
        """True when the rule matches, None when a condition could not be decided."""
        if not (self.tool_matches(tool) and self.principal_matches(principal)):
            return False
        result: bool | None = True
        for condition in self.when:
            holds = condition.test(arguments)
            if holds is False:
                return False
            if holds is None:
                result = None
        return result


class PolicyDocument(_Model):
    """A validated policy; call it as litmus_score.scoring.rules.Policy."""

    schema_: PolicySchema = Field(alias="schema")
    default: Literal["allow", "deny"] | None = None
    allowed_principals: list[Principal] | None = Field(None, min_length=1)
    tools: list[ToolName] = []
    rules: list[Rule] = []

    _named: frozenset = PrivateAttr()
    _allowed: frozenset | None = PrivateAttr()
    _canonical: str = PrivateAttr()
    _sha256: str = PrivateAttr()

    @field_validator("rules")
    @classmethod
    def _unique_ids(cls, rules):
        first: dict[str, int] = {}
        for index, rule in enumerate(rules):
            if rule.id in first:
                raise _fail(f"duplicate rule id {rule.id!r} (rules[{first[rule.id]}] and rules[{index}])")
            first[rule.id] = index
            if rule.id in c.DECIDERS:
                raise _fail(f"rule id {rule.id!r} (rules[{index}]) is reserved: it names what decided a verdict")
        return rules

    @model_validator(mode="after")
    def _prepare(self):
        named = {rule.tool for rule in self.rules if rule.tool is not None and not rule.is_glob}
        self._named = frozenset(self.tools) | named
        self._allowed = None if self.allowed_principals is None else frozenset(self.allowed_principals)
        self._canonical = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True,
                                     separators=(",", ":"))
        self._sha256 = hashlib.sha256(self._canonical.encode("utf-8")).hexdigest()
        return self

    @property
    def canonical(self) -> str:
        """The validated policy as compact JSON with sorted keys: what a run
        stores as policy.json, and what `sha256` hashes."""
        return self._canonical

    @property
    def sha256(self) -> str:
        """sha256 hex of the canonical form; goes into the manifest and metrics.json."""
        return self._sha256

    def explain(self, tool: str, arguments: dict, principal: str) -> tuple[str | None, str | None]:
        """(verdict, why). why is the id of the rule that denied, or
        PRINCIPAL_NOT_ALLOWED, or the first undecided rule when that made the
        verdict None; it is None when no rule decided."""
        if not self.principal_allowed(principal):
            return c.DENY, PRINCIPAL_NOT_ALLOWED
        undecided = None
        for rule in self.rules:
            matched = rule.test(tool, arguments, principal)
            if matched:
                return c.DENY, rule.id
            if matched is None and undecided is None:
                undecided = rule.id
        if undecided is not None:
            return None, undecided
        return self.undenied(tool), None

    def decide(self, tool: str, arguments: dict, principal: str) -> tuple[str | None, str | None]:
        """(verdict, decided_by): the id of the rule that denied, or
        BY_PRINCIPAL_CHECK, BY_TOOL_LIST or BY_DEFAULT; (None, None) where the
        policy gives no verdict."""
        verdict, why = self.explain(tool, arguments, principal)
        if verdict is None:
            return None, None
        if why is not None:
            return verdict, why
        return verdict, c.BY_TOOL_LIST if self.names_tool(tool) else c.BY_DEFAULT

    def principal_allowed(self, principal) -> bool:
        """False where `allowed_principals` is set and leaves `principal` out."""
        return self._allowed is None or principal in self._allowed

    def names_tool(self, tool) -> bool:
        """Whether the policy names `tool` (in `tools`, or as a rule's exact tool)."""
        return tool in self._named

    def undenied(self, tool) -> str | None:
        """The verdict for a call that no rule denies or leaves undecided."""
        return c.ALLOW if self.names_tool(tool) else self.default

    def __call__(self, tool: str, arguments: dict, principal: str) -> str | None:
        return self.explain(tool, arguments, principal)[0]


def parse_policy(data: Any, source: str = "<policy>") -> PolicyDocument:
    """Validate an already parsed document; errors name `source`."""
    return configfile.validate(PolicyDocument, data, source, PolicyError, "a policy")


def load_policy_source(path, read=configfile.read_regular) -> tuple:
    """(the validated policy, the file's text): read with `read` (as
    configfile.load_text: a local file by default), parsed, validated;
    PolicyError on any fault but I/O."""
    text = configfile.load_text(path, PolicyError, MAX_POLICY_BYTES, read)
    return configfile.parse(text, str(path), PolicyDocument, PolicyError, "a policy"), text


def load_policy(path, read=configfile.read_regular) -> PolicyDocument:
    """Read, parse and validate a policy file; PolicyError on any fault but I/O."""
    return load_policy_source(path, read)[0]


# The settings of a policy besides its rules, as policy_diff compares them.
SETTINGS = ("schema", "default", "allowed_principals", "tools")


def rule_id(rule: Mapping) -> str:
    """The id a rule is known by across policies: litmus-policy/1 requires
    one, unique, on every rule, so it is the `id` the file gives."""
    return rule["id"]


def policy_diff(new: Mapping | None, old: Mapping | None) -> dict:
    """What changed from the policy `old` to `new`, each a canonical policy
    (json.loads of PolicyDocument.canonical) or None for a run scored
    without one: the rules added and removed (whole), the rules changed
    (by id: the fields that differ, both versions) and the settings changed
    (SETTINGS)."""
    new_rules = {rule_id(rule): rule for rule in (new or {}).get("rules") or []}
    old_rules = {rule_id(rule): rule for rule in (old or {}).get("rules") or []}
    return {
        "rules_added": [rule for key, rule in new_rules.items() if key not in old_rules],
        "rules_removed": [rule for key, rule in old_rules.items() if key not in new_rules],
        "rules_changed": [{"id": key, "fields": sorted(name for name in rule.keys() | old_rules[key].keys()
                                                      if rule.get(name) != old_rules[key].get(name)),
                           "new": rule, "old": old_rules[key]}
                          for key, rule in new_rules.items() if key in old_rules and old_rules[key] != rule],
        "settings_changed": [{"setting": name, "new": (new or {}).get(name), "old": (old or {}).get(name)}
                             for name in SETTINGS if (new or {}).get(name) != (old or {}).get(name)],
    }
