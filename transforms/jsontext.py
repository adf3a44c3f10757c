"""JSON texts of Arrow string columns, judged as litmus_score.scoring.rules judges one text.

Each routine has two implementations that give the same results:

- compiled (`transforms._native`, built from transforms/_native.c when the
  package is installed): reads the texts from the column's buffers without
  making a Python object per text and without holding the GIL, and hands the
  rows it cannot settle exactly back to Python (a text nested deeper than
  DEPTH_LIMIT, an integer beyond 64 bits compared with a float);
- pure Python (the twin, below): RE2 over the column, orjson and json for
  the texts RE2 cannot settle.

The compiled routines are used when the extension imports; setting
LITMUS_NATIVE=0 forces the twin (CI runs the agreement tests that way too).
One log line at import says which is in use. tests/test_jsontext.py holds the
two equal to the rules, on generated JSON and on raw bytes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from litmus_score.scoring.rules import canonical_json, json_depth, parse_json_object
from litmus_score.scoring.trajectory import MAX_JSON_DEPTH_LIMIT
from transforms.columnar import equals, is_null

NATIVE_VARIABLE = "LITMUS_NATIVE"
# Deeper texts are handed to Python; completeness keeps them out of resolution
# (`--max_json_depth` is at most this).
DEPTH_LIMIT = MAX_JSON_DEPTH_LIMIT
# The policy's kinds of value (transforms/_native.c writes the same codes).
ABSENT, NULL, BOOL, NUMBER, STRING, LIST, OBJECT = range(7)

_log = logging.getLogger(__name__)


def _load():
    if os.environ.get(NATIVE_VARIABLE, "1") == "0":
        _log.info("JSON texts: pure Python (%s=0)", NATIVE_VARIABLE)
        return None
    try:
        from transforms import _native
    except ImportError as error:
        _log.warning("JSON texts: pure Python, the compiled part transforms._native is not built (%s)", error)
        return None
    _log.info("JSON texts: compiled (transforms._native)")
    return _native


_compiled = _load()


def native() -> bool:
    """Whether the compiled routines are in use."""
    return _compiled is not None


def available() -> bool:
    """Whether the compiled routines can be used (built, whatever LITMUS_NATIVE says)."""
    try:
        from transforms import _native  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def implementation(compiled: bool):
    """Use the compiled routines (True) or the twin (False) inside the block; for tests."""
    global _compiled
    saved = _compiled
    if compiled:
        from transforms import _native

        _compiled = _native
    else:
        _compiled = None
    try:
        yield
    finally:
        _compiled = saved


def _strings(texts: pa.Array) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)):
        texts = texts.cast(pa.string())
    return texts


def _column(texts: pa.Array) -> tuple:
    """(offsets, data, offset, length, wide): what the compiled routines read of a string array."""
    _, offsets, data = texts.buffers()
    return offsets, data, texts.offset, len(texts), pa.types.is_large_string(texts.type)


def _valid_rows(texts: pa.Array) -> np.ndarray:
    return np.flatnonzero(~is_null(texts)).astype(np.int64)


# ---------------------------------------------------------------- nesting depth

def too_deep(texts: pa.Array, max_depth: int) -> np.ndarray:
    """Which texts nest deeper than `max_depth` (litmus_score.scoring.rules.json_depth); null is not."""
    texts = _strings(texts)
    deep = np.zeros(len(texts), bool)
    if _compiled is not None:
        rows = _valid_rows(texts)
        found = np.empty(len(rows), np.bool_)
        _compiled.too_deep(*_column(texts), rows, max_depth, found.view(np.uint8))
        deep[rows] = found
        return deep
    # Depth is at most the number of opening brackets, counted on the bytes of
    # the whole column at once; only texts with more brackets than the bound
    # are scanned in Python.
    unsure = np.flatnonzero(_openings(texts) > max_depth)
    if len(unsure):
        deep[unsure] = [json_depth(text) > max_depth for text in texts.take(pa.array(unsure)).to_pylist()]
    return deep


def _openings(texts: pa.Array) -> np.ndarray:
    """How many `[` and `{` bytes each text holds (0 for null)."""
    offsets_type = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    offsets = np.frombuffer(texts.buffers()[1], offsets_type)[texts.offset:texts.offset + len(texts) + 1]
    if offsets[-1] == offsets[0]:
        return np.zeros(len(texts), np.int64)
    data = np.frombuffer(texts.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
    # "[" is 0x5B and "{" 0x7B: they differ in one bit, which no other byte pair shares.
    opening = np.bitwise_or(data, 0x20)
    at = np.flatnonzero(np.equal(opening, 0x7B, out=opening.view(bool)))
    counts = np.diff(np.searchsorted(at, offsets - offsets[0]))
    return np.where(np.asarray(texts.is_null(), bool), 0, counts)


# ---------------------------------------------------------------- JSON objects

# JSON nested at most _REGEX_DEPTH deep is a regular language, so a RE2
# expression can recognize it exactly: a match proves the text is a valid JSON
# object. A non-match proves nothing: those few texts go to the reference
# parser, which also handles deeper nesting.
_REGEX_DEPTH = 3
_WS = r"[ \t\n\r]*"
_STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_SCALAR = rf"(?:{_STRING}|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null)"


def _object(value: str) -> str:
    member = f"{_WS}{_STRING}{_WS}:{_WS}{value}{_WS}"
    return rf"\{{(?:{member}(?:,{member})*|{_WS})\}}"


def _array(value: str) -> str:
    item = f"{_WS}{value}{_WS}"
    return rf"\[(?:{item}(?:,{item})*|{_WS})\]"


def _json_value(depth: int) -> str:
    if depth == 0:
        return _SCALAR
    inner = _json_value(depth - 1)
    return f"(?:{_SCALAR}|{_object(inner)}|{_array(inner)})"


JSON_OBJECT = rf"^{_WS}{_object(_json_value(_REGEX_DEPTH - 1))}{_WS}$"
# Python may refuse to read an integer of more digits (sys.set_int_max_str_digits
# takes no limit under 640): such texts are left to the parser.
_MAX_INT_DIGITS = 640
_LONG_INTEGER = rf"[0-9]{{{_MAX_INT_DIGITS + 1}}}"


def json_objects(texts: pa.Array) -> np.ndarray:
    """Which texts are JSON objects, exactly as litmus_score.scoring.rules.parse_json_object says (null: not)."""
    texts = _strings(texts)
    if _compiled is not None:
        ok = np.zeros(len(texts), bool)
        rows = _valid_rows(texts)
        status = np.empty(len(rows), np.int8)
        _compiled.objects(*_column(texts), rows, DEPTH_LIMIT, status)
        ok[rows] = status == 1
        unsure = rows[status == 2]
    else:
        ok = np.asarray(pc.fill_null(pc.match_substring_regex(texts, JSON_OBJECT), False), bool)
        long = np.flatnonzero(ok & equals(pc.greater(pc.binary_length(texts), _MAX_INT_DIGITS), True))
        if len(long):
            ok[long[equals(pc.match_substring_regex(texts.take(pa.array(long)), _LONG_INTEGER), True)]] = False
        unsure = np.flatnonzero(~ok & ~is_null(texts))
    if len(unsure):
        ok[unsure] = [parse_json_object(text) is not None for text in texts.take(pa.array(unsure)).to_pylist()]
    return ok


# ---------------------------------------------------------------- parsing (the twin's)

# orjson parses JSON to the values json.loads gives, several times faster,
# except integers beyond 64 bits (it makes them floats) and lone surrogate
# escapes (it refuses them): a text where a number of 19 digits or more may
# start (after `:`, `[` or `,`; inside a string too, to be safe) is left to
# json, and so is a list orjson refuses.
_LONG_DIGITS = r"[:\[,][ \t\n\r]*-?[0-9]{19}"


def _loads(texts: list) -> list:
    """Valid JSON texts, parsed in one call of the C decoder (most of a call's cost is its setup)."""
    try:
        return json.loads("[" + ",".join(texts) + "]")
    except RecursionError:  # one text nested within a level of Python's limit
        return [parse_json_object(text) for text in texts]


def _json_array(texts: pa.Array) -> bytes:
    """The UTF-8 of `[text,text,...]`, joined by Arrow.

    orjson parses bytes twice as fast as a str holding non-ASCII (it must
    encode the str first), and no Python string is made per text.
    """
    if not len(texts):
        return b"[]"
    # Each text followed by a comma; large offsets, since the commas may pass 2 GiB.
    comma, nothing = (pa.scalar(text, pa.large_string()) for text in (",", ""))
    joined = pc.binary_join_element_wise(texts.cast(pa.large_string()), comma, nothing)
    offsets = np.frombuffer(joined.buffers()[1], np.int64)
    start, end = offsets[joined.offset], offsets[joined.offset + len(joined)]
    return b"[" + memoryview(joined.buffers()[2])[start:end - 1] + b"]"


def parse_objects(texts: pa.Array) -> list:
    """JSON object texts (not null, at least one), parsed exactly as json.loads parses them."""
    exact = equals(pc.match_substring_regex(texts, _LONG_DIGITS), True)
    fast = np.flatnonzero(~exact)
    try:
        parsed = orjson.loads(_json_array(texts if len(fast) == len(texts) else texts.take(pa.array(fast))))
    except orjson.JSONDecodeError:
        return _loads(texts.to_pylist())
    if len(fast) == len(texts):
        return parsed
    result = [None] * len(texts)
    for i, value in zip(fast.tolist(), parsed):
        result[i] = value
    slow = np.flatnonzero(exact)
    for i, value in zip(slow.tolist(), _loads(texts.take(pa.array(slow)).to_pylist())):
        result[i] = value
    return result


# ---------------------------------------------------------------- equal values

def _booleans_equal(a, b) -> bool:
    """For parsed objects that Python's == calls equal: equal as JSON values too?

    Python's == differs from canonical_json only in taking a boolean for a
    number (True == 1). Sorted serializations that match settle it in C;
    they differ for 1 and 1.0, which canonical_json then decides, as it does
    for integers orjson cannot write.
    """
    try:
        if orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS):
            return True
    except orjson.JSONEncodeError:
        pass
    return canonical_json(a) == canonical_json(b)


def equal_parsed(left: pa.Array, right: pa.Array, lefts: list, rights: list) -> np.ndarray:
    """Whether parsed JSON objects (of the texts `left`, `right`) are the same value (the twin's comparison)."""
    # RE2 finds either literal in one pass, three times faster than match_substring twice.
    booleans = np.logical_or.reduce([equals(pc.match_substring_regex(text, "true|false"), True)
                                     for text in (left, right)])
    equal = np.array([a == b for a, b in zip(lefts, rights)], bool)
    # A boolean needs a `true` or `false` literal in the text.
    for i in np.flatnonzero(equal & booleans).tolist():
        equal[i] = _booleans_equal(lefts[i], rights[i])
    return equal


def same_values(left: pa.Array, right: pa.Array, pairs: np.ndarray) -> np.ndarray:
    """Compiled: whether the JSON object texts left[i] and right[i] are the same value, for i in `pairs`."""
    left, right = _strings(left), _strings(right)
    pairs = np.asarray(pairs, np.int64)
    status = np.empty(len(pairs), np.int8)
    _compiled.same(*_column(left), *_column(right), pairs, DEPTH_LIMIT, status)
    unsure = pairs[status == 2]
    same = status == 1
    if len(unsure):
        lefts, rights = (texts.take(pa.array(unsure)).to_pylist() for texts in (left, right))
        same[status == 2] = [canonical_json(parse_json_object(a)) == canonical_json(parse_json_object(b))
                             for a, b in zip(lefts, rights)]
    return same


# ---------------------------------------------------------------- values at key paths

def extract(texts: pa.Array, rows: np.ndarray, paths: list, want: np.ndarray) -> dict:
    """Compiled: the values at each of `paths` (tuples of keys) in the JSON object texts at `rows`,
    where `want[path index, row]`, as columns (path index first): kinds (ABSENT ... OBJECT), numbers
    (float64, NaN for none), truth, inexact (Python must read the value) and one string array per path
    (null but for exact strings)."""
    texts = _strings(texts)
    rows = np.asarray(rows, np.int64)
    n, shape = len(rows), (len(paths), len(rows))
    kinds, numbers = np.empty(shape, np.int8), np.empty(shape, np.float64)
    truth, inexact = np.empty(shape, np.bool_), np.empty(shape, np.bool_)
    offsets = np.empty((len(paths), n + 1), np.int32)
    encoded = tuple(tuple(key.encode("utf-8", "surrogatepass") for key in path) for path in paths)
    data = _compiled.extract(*_column(texts), rows, encoded, np.ascontiguousarray(want, np.uint8), DEPTH_LIMIT,
                             kinds, numbers, truth.view(np.uint8), inexact.view(np.uint8), offsets)
    buffer = pa.py_buffer(data)
    strings = []
    for i in range(len(paths)):
        present = (kinds[i] == STRING) & ~inexact[i]
        validity = pa.py_buffer(np.packbits(present, bitorder="little")) if not present.all() else None
        strings.append(pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets[i]), buffer])
                       if present.any() else None)
    return {"kinds": kinds, "numbers": numbers, "truth": truth, "inexact": inexact, "strings": strings}
