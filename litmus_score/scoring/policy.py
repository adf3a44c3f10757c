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
- `glob`: the whole string matches an fnmatch pattern, case-sensitive, where
  `*` also crosses `/`;
- `regex`: Python `re.search` (unanchored: write ^ and $ to anchor);
- `gt`, `ge`, `lt`, `le`: against a number; booleans are not numbers.

An argument that does not resolve satisfies only `exists: false`. A value of
the wrong kind (a string for `gt`, a number for `regex`) does not match.

Bounds: Python's `re` has no timeout, so patterns (regex, glob, tool globs,
arg paths) are at most 256 characters and compile at load time, and a string
over 4096 characters is not matched by regex or glob but leaves its rule
undecided. With these bounds a pattern that backtracks quadratically costs
about 10 ms a string; a cubic one (`a*a*b`) costs seconds and a nested one
(`(a+)+$`) is exponential: those are the policy author's to avoid.

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
descriptions included.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import operator
import re
from typing import Annotated, Any, Literal, Optional

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

POLICY_SCHEMA = "litmus-policy/1"
MAX_POLICY_BYTES = 1024 * 1024
MAX_PATTERN_LENGTH = 256
# Long enough for a path, an address or an SQL statement; short enough that
# a quadratically backtracking search stays near 10 ms.
MAX_SUBJECT_LENGTH = 4096
PRINCIPAL_NOT_ALLOWED = "allowed_principals"

_COMPARISONS = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}
# Operator name (as written in the file) -> model field name.
_OPERATOR_FIELDS = {
    "equals": "equals", "not_equals": "not_equals", "in": "in_", "not_in": "not_in",
    "glob": "glob", "regex": "regex", "exists": "exists", **{name: name for name in _COMPARISONS},
}
_GLOB_CHARACTERS = re.compile(r"[*?\[]")
_MISSING = object()

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


def _glob_regex(pattern: str) -> re.Pattern:
    return re.compile(r"\A" + fnmatch.translate(pattern))


class _Model(BaseModel):
    # strict: "10" is not a number and "yes" not a boolean; frozen: the hash
    # computed at load time stays the hash of the content.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Condition(_Model):
    """One argument and one operator."""

    arg: ArgPath
    equals: JsonValue = None
    not_equals: JsonValue = None
    in_: Optional[list[JsonValue]] = Field(None, alias="in")
    not_in: Optional[list[JsonValue]] = None
    glob: Optional[PatternText] = None
    regex: Optional[PatternText] = None
    gt: Optional[FiniteFloat] = None
    ge: Optional[FiniteFloat] = None
    lt: Optional[FiniteFloat] = None
    le: Optional[FiniteFloat] = None
    exists: Optional[bool] = None

    _operator: str = PrivateAttr()
    _path: tuple = PrivateAttr()
    _expected: Any = PrivateAttr()

    @field_validator("regex")
    @classmethod
    def _compiles(cls, pattern):
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as error:
                raise _fail(f"invalid regex: {error}")
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
        elif name == "glob":
            expected = _glob_regex(value)
        elif name == "regex":
            expected = re.compile(value)
        else:
            expected = value
        self._operator, self._path, self._expected = name, tuple(self.arg.split(".")), expected
        return self

    @model_serializer
    def _canonical(self):
        # Only the operator given: an unset `equals` and `equals: null` differ.
        return {"arg": self.arg, self._operator: getattr(self, _OPERATOR_FIELDS[self._operator])}

    def test(self, arguments: dict) -> Optional[bool]:
        """Whether the condition holds; None when the string is too long to match."""
        value = arguments
        for key in self._path:
            value = value.get(key, _MISSING) if isinstance(value, dict) else _MISSING
            if value is _MISSING:
                break
        name = self._operator
        if name == "exists":
            return (value is not _MISSING) == self.exists
        if value is _MISSING:
            return False
        if name in ("equals", "not_equals"):
            return (canonical_json(value) == self._expected) == (name == "equals")
        if name in ("in", "not_in"):
            return (canonical_json(value) in self._expected) == (name == "in")
        if name in ("glob", "regex"):
            if not isinstance(value, str):
                return False
            if len(value) > MAX_SUBJECT_LENGTH:
                return None
            return self._expected.search(value) is not None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return _COMPARISONS[name](value, self._expected)


class PrincipalCondition(_Model):
    """`{in: [...]}` or `{not_in: [...]}` on the acting principal."""

    in_: Optional[list[Principal]] = Field(None, alias="in")
    not_in: Optional[list[Principal]] = None

    @model_validator(mode="after")
    def _one_operator(self):
        if (self.in_ is None) == (self.not_in is None):
            raise _fail("give exactly one of in, not_in")
        return self

    def test(self, principal: str) -> bool:
        if self.in_ is not None:
            return principal in self.in_
        return principal not in self.not_in


class Rule(_Model):
    """A deny rule: tool, principal and every condition must match."""

    id: RuleId
    description: Optional[str] = None
    tool: Optional[ToolPattern] = None
    when: list[Condition] = []
    principal: Optional[PrincipalCondition] = None
    effect: Literal["deny"]

    _tool_regex: Optional[re.Pattern] = PrivateAttr(None)

    @model_validator(mode="after")
    def _constrained(self):
        if self.tool is None and not self.when and self.principal is None:
            raise _fail("a rule needs a tool, a when or a principal; this one would deny every call")
        if self.is_glob:
            self._tool_regex = _glob_regex(self.tool)
        return self

    @property
    def is_glob(self) -> bool:
        return self.tool is not None and _GLOB_CHARACTERS.search(self.tool) is not None

    def test(self, tool: str, arguments: dict, principal: str) -> Optional[bool]:
        """True when the rule matches, None when a condition could not be decided."""
        if self._tool_regex is not None:
            if not isinstance(tool, str) or self._tool_regex.match(tool) is None:
                return False
        elif self.tool is not None and tool != self.tool:
            return False
        if self.principal is not None and not self.principal.test(principal):
            return False
        result = True
        for condition in self.when:
            holds = condition.test(arguments)
            if holds is False:
                return False
            if holds is None:
                result = None
        return result


class PolicyDocument(_Model):
    """A validated policy; call it as litmus_score.scoring.rules.Policy."""

    schema_: Literal[POLICY_SCHEMA] = Field(alias="schema")
    default: Optional[Literal["allow", "deny"]] = None
    allowed_principals: Optional[list[Principal]] = Field(None, min_length=1)
    tools: list[ToolName] = []
    rules: list[Rule] = []

    _named: frozenset = PrivateAttr()
    _allowed: Optional[frozenset] = PrivateAttr()
    _sha256: str = PrivateAttr()

    @field_validator("rules")
    @classmethod
    def _unique_ids(cls, rules):
        first = {}
        for index, rule in enumerate(rules):
            if rule.id in first:
                raise _fail(f"duplicate rule id {rule.id!r} (rules[{first[rule.id]}] and rules[{index}])")
            first[rule.id] = index
        return rules

    @model_validator(mode="after")
    def _prepare(self):
        self._named = frozenset(self.tools) | {rule.tool for rule in self.rules if rule.tool is not None and not rule.is_glob}
        self._allowed = None if self.allowed_principals is None else frozenset(self.allowed_principals)
        canonical = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))
        self._sha256 = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        return self

    @property
    def sha256(self) -> str:
        """sha256 hex of the canonical form; goes into the manifest and metrics.json."""
        return self._sha256

    def explain(self, tool: str, arguments: dict, principal: str) -> tuple[Optional[str], Optional[str]]:
        """(verdict, why). why is the id of the rule that denied, or
        PRINCIPAL_NOT_ALLOWED, or the first undecided rule when that made the
        verdict None; it is None when no rule decided."""
        if self._allowed is not None and principal not in self._allowed:
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
        return (c.ALLOW if tool in self._named else self.default), None

    def __call__(self, tool: str, arguments: dict, principal: str) -> Optional[str]:
        return self.explain(tool, arguments, principal)[0]


def parse_policy(data: Any, source: str = "<policy>") -> PolicyDocument:
    """Validate an already parsed document; errors name `source`."""
    return configfile.validate(PolicyDocument, data, source, PolicyError, "a policy")


def load_policy(path) -> PolicyDocument:
    """Read, parse and validate a policy file; PolicyError on any fault but I/O."""
    return configfile.load(path, PolicyDocument, PolicyError, "a policy", MAX_POLICY_BYTES)
