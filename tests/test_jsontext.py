"""transforms.jsontext, compiled and pure Python, equals litmus_score.scoring.rules text by text.

Hypothesis draws JSON texts written every way JSON allows (tests/json_texts.py),
texts that are nearly JSON, deep nesting, and raw bytes (invalid UTF-8,
truncations, stray bytes); every routine's answer for every text is compared
with the rules' (parse_json_object, json_depth, canonical_json,
resolve_path). The compiled routines are also given buffers that lie.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from litmus_score.scoring.policy import resolve_path
from litmus_score.scoring.rules import canonical_json, json_depth, parse_json_object
from tests.json_texts import DEEP, IDS, IMPLEMENTATIONS, KEYS, OBJECTS, ODD, VALUES, examples, texts_of, utf8
from transforms import jsontext
from transforms.policy import ArgumentTexts, ParsedArguments, Values, View

# Per implementation where a test runs on both (`examples`).
SETTINGS = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
compiled_only = pytest.mark.skipif(not jsontext.native(), reason="transforms._native is not in use")


@st.composite
def texts(draw, spelled=True):
    """A text of a JSON object or other value, a near miss, or deep nesting."""
    kind = draw(st.integers(0, 9))
    if kind < 5:
        return draw(texts_of(draw(OBJECTS), spelled))
    if kind < 7:
        return draw(texts_of(draw(VALUES), spelled))
    return draw(ODD if kind < 9 else DEEP)


def text_array(items) -> pa.Array:
    return pa.array(items, pa.string())


def raw_array(items) -> pa.Array:
    """Bytes as a string column, not validated (what the compiled routines must survive)."""
    return pa.array(items, pa.binary()).view(pa.string())


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS, ids=IDS)
@SETTINGS
@given(items=st.lists(texts() | st.none(), max_size=12))
def test_json_objects_are_what_parse_json_object_accepts(compiled, items):
    with jsontext.implementation(compiled):
        found = jsontext.json_objects(text_array(items)).tolist()
    assert found == [item is not None and parse_json_object(item) is not None for item in items]


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS, ids=IDS)
@SETTINGS
@given(items=st.lists(texts() | st.none(), max_size=12), bound=st.integers(0, 70))
def test_too_deep_is_json_depth_over_the_bound(compiled, items, bound):
    with jsontext.implementation(compiled):
        found = jsontext.too_deep(text_array(items), bound).tolist()
    assert found == [item is not None and json_depth(item) > bound for item in items]


@st.composite
def pairs(draw):
    """Two texts of JSON objects: the same value written twice, or two values from small pools (often equal)."""
    left = draw(OBJECTS)
    right = left if draw(st.booleans()) else draw(OBJECTS)
    return draw(texts_of(left, spelled=True)), draw(texts_of(right, spelled=True))


def same_by_the_rules(left: str, right: str) -> bool:
    return canonical_json(parse_json_object(left)) == canonical_json(parse_json_object(right))


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS, ids=IDS)
@SETTINGS
@given(drawn=st.lists(pairs(), min_size=1, max_size=10))
def test_same_values_are_what_canonical_json_says(compiled, drawn):
    left, right = (text_array([pair[i] for pair in drawn]) for i in (0, 1))
    with jsontext.implementation(compiled):
        if compiled:
            same = jsontext.same_values(left, right, np.arange(len(drawn)))
        else:
            same = jsontext.equal_parsed(left, right, jsontext.parse_objects(left), jsontext.parse_objects(right))
    assert same.tolist() == [same_by_the_rules(*pair) for pair in drawn]


PATHS = [(key,) for key in KEYS] + [("a", "b"), ("b", "a"), ("a", "a", "n"), ("n", "")]


def assert_views_equal(found: View, expected: View) -> None:
    """The columns the compiled policy decides on, and the values it asks the statement about."""
    assert found.kinds.tolist() == expected.kinds.tolist()
    assert found.inexact.tolist() == expected.inexact.tolist()
    assert np.array_equal(found.numbers, expected.numbers, equal_nan=True)
    assert found.truth.tolist() == expected.truth.tolist()
    strings = [None] * len(found.kinds)  # no string column: no string
    assert (strings if found.strings is None else found.strings.to_pylist()) == (
        strings if expected.strings is None else expected.strings.to_pylist())
    for i in np.flatnonzero(expected.inexact | (expected.kinds >= jsontext.LIST)).tolist():
        assert canonical_json(found.value(i)) == canonical_json(expected.value(i))


@compiled_only
@SETTINGS
@given(objects=st.lists(OBJECTS, min_size=1, max_size=8), data=st.data())
def test_extracted_values_are_the_values_at_the_paths(objects, data):
    items = [data.draw(texts_of(value, spelled=True)) for value in objects]
    parsed = [parse_json_object(item) for item in items]
    rows = np.array(data.draw(st.lists(st.integers(0, len(items) - 1), min_size=1, max_size=10)))
    paths = data.draw(st.lists(st.sampled_from(PATHS), min_size=1, max_size=4, unique=True))
    readers = {path: np.array(data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows))))
               for path in paths}
    columns = ArgumentTexts(text_array(items), rows).columns(readers)
    for path, calls in readers.items():
        values, position = columns[path]
        read = np.flatnonzero(calls)
        expected = Values.of([resolve_path(parsed[rows[i]], path) for i in read.tolist()])
        assert_views_equal(View(values, position[read]), View(expected))


# ---------------------------------------------------------------- raw bytes

BYTES = st.sampled_from([b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff", b"\xc3", b"\xe2\x82",
                         b"\x00", b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"\\u", b"\\ud800", b"9" * 30,
                         b"e", b"-", b"."]) | st.binary(min_size=1, max_size=3)


@st.composite
def mutated(draw):
    """A JSON text's bytes with a few bytes inserted, deleted or replaced, or cut short."""
    data = bytearray(utf8(draw(texts())))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        operation = draw(st.sampled_from(["insert", "delete", "replace", "cut"]))
        if operation == "insert":
            data[at:at] = draw(BYTES)
        elif operation == "delete":
            del data[at:at + draw(st.integers(1, 4))]
        elif operation == "replace":
            data[at:at + 1] = draw(BYTES)
        else:
            del data[at:]
    return bytes(data)


RAW = mutated() | st.binary(max_size=40)


def object_by_the_rules(raw: bytes):
    """The parsed object of raw bytes, or None (bytes that are not UTF-8 are not a JSON text)."""
    try:
        return parse_json_object(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None


@compiled_only
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(RAW, min_size=1, max_size=8), bound=st.integers(0, 8))
def test_raw_bytes_are_judged_as_the_rules_judge_their_text(items, bound):
    from transforms import _native

    array, rows = raw_array(items), np.arange(len(items), dtype=np.int64)
    objects = [object_by_the_rules(raw) for raw in items]
    status = np.empty(len(items), np.int8)
    _native.objects(*jsontext._column(array), rows, jsontext.DEPTH_LIMIT, status)
    for raw, parsed, said in zip(items, objects, status.tolist()):
        if said == 2:  # handed to Python: nested beyond the bound, or an integer Python may refuse
            assert json_depth(raw.decode("utf-8", "replace")) > jsontext.DEPTH_LIMIT or re.search(rb"[0-9]{641}", raw)
        else:
            assert said == (parsed is not None)
    deep = np.empty(len(items), np.uint8)
    _native.too_deep(*jsontext._column(array), rows, bound, deep)
    # Decoding with U+FFFD (as the read stage does) changes no byte json_depth reads.
    assert deep.astype(bool).tolist() == [json_depth(raw.decode("utf-8", "replace")) > bound for raw in items]
    same = np.empty(len(items), np.int8)
    _native.same(*jsontext._column(array), *jsontext._column(raw_array(items[::-1])), rows, jsontext.DEPTH_LIMIT,
                 same)
    for i, (left, right) in enumerate(zip(objects, objects[::-1])):
        if left is None or right is None:
            assert same[i] == 2  # not two objects: not the routine's to say
        elif same[i] != 2:
            assert bool(same[i]) == (canonical_json(left) == canonical_json(right))
    found = jsontext.extract(array, rows, [("a",), ("a", "b")], np.ones((2, len(items)), bool))
    for i, parsed in enumerate(objects):
        if parsed is None or status[i] == 2:  # Python reads every value of such a text
            assert found["inexact"][:, i].all()
            continue
        for p, path in enumerate([("a",), ("a", "b")]):
            expected = Values.of([resolve_path(parsed, path)])
            assert (found["kinds"][p, i], found["inexact"][p, i]) == (expected.kinds[0], expected.inexact[0])


@compiled_only
@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000,
                                  '{"a": ' + "[" * 257 + "]" * 257 + "}", '{"a": "' + "\\" * 100_001 + '"}'])
def test_nesting_deeper_than_the_bound_is_handed_to_python(text):
    from transforms import _native

    status = np.empty(1, np.int8)
    _native.objects(*jsontext._column(text_array([text])), np.zeros(1, np.int64), jsontext.DEPTH_LIMIT, status)
    assert status[0] == (0 if text.endswith('"}') else 2)
    assert jsontext.json_objects(text_array([text])).tolist() == [parse_json_object(text) is not None]
    assert jsontext.too_deep(text_array([text]), 256).tolist() == [json_depth(text) > 256]


@compiled_only
def test_numbers_compare_as_python_compares_them():
    pairs = [("1", "1.0"), ("1", "1e0"), ("-0", "0.0"), ("-0.0", "0"), ("9007199254740993", "9007199254740992.0"),
             ("9223372036854775807", "9223372036854775807.0"), ("-9223372036854775808", "-9223372036854775808.0"),
             ("18446744073709551616", "18446744073709551616"), ("18446744073709551616", "1.8446744073709552e19"),
             ("100000000000000000000", "1e20"), ("1e400", "2e400"), ("1e400", "-1e400"), ("0.1", "0.10000000000000001"),
             ("true", "1"), ("false", "0"), ("null", "0"), ("4.9e-324", "5e-324"), ("1e-400", "0")]
    left = text_array([f'{{"n": {a}}}' for a, _ in pairs])
    right = text_array([f'{{"n": {b}}}' for _, b in pairs])
    same = jsontext.same_values(left, right, np.arange(len(pairs)))
    assert same.tolist() == [same_by_the_rules(f'{{"n": {a}}}', f'{{"n": {b}}}') for a, b in pairs]


# ---------------------------------------------------------------- buffers that lie

def lying_column(offsets, data=b"{}{}", offset=0, length=None, wide=False):
    offsets = np.asarray(offsets, np.int64 if wide else np.int32)
    return (offsets.tobytes(), data, offset, len(offsets) - 1 if length is None else length, wide)


@compiled_only
@pytest.mark.parametrize("column, error", [
    (lying_column([0, 2, 9]), IndexError),  # past the data
    (lying_column([0, -2, 4]), IndexError),  # negative
    (lying_column([0, 4, 2]), IndexError),  # decreasing
    (lying_column([0, 2], length=2), ValueError),  # fewer offsets than the array's length
    (lying_column([0, 2, 4], offset=2), ValueError),  # an offset past the offsets
    (lying_column([0, 2, 4], offset=-1), ValueError),
    (lying_column([0, 2, 4], wide=True, data=None), IndexError),  # no data at all
    (lying_column([0, 2, 4])[:1] + (b"{}{}", 0, 2, True), ValueError),  # 32-bit offsets read as 64
])
def test_a_column_whose_offsets_lie_is_refused(column, error):
    from transforms import _native

    rows = np.arange(2, dtype=np.int64)
    for call in (lambda: _native.objects(*column, rows, 8, np.empty(2, np.int8)),
                 lambda: _native.too_deep(*column, rows, 8, np.empty(2, np.uint8)),
                 lambda: _native.same(*column, *column, rows, 8, np.empty(2, np.int8)),
                 lambda: _native.extract(*column, rows, ((b"a",),), np.ones(2, np.uint8), 8, np.empty(2, np.int8),
                                         np.empty(2), np.empty(2, np.uint8), np.empty(2, np.uint8),
                                         np.empty(3, np.int32))):
        with pytest.raises(error):
            call()


@compiled_only
def test_rows_outputs_and_paths_that_do_not_fit_are_refused():
    from transforms import _native

    column = lying_column([0, 2, 4])
    for rows in (np.array([2]), np.array([-1])):
        with pytest.raises(IndexError):
            _native.objects(*column, rows.astype(np.int64), 8, np.empty(1, np.int8))
    with pytest.raises(ValueError):
        _native.objects(*column, np.zeros(1, np.int32), 8, np.empty(1, np.int8))  # not int64
    with pytest.raises(ValueError):
        _native.objects(*column, np.zeros(2, np.int64), 8, np.empty(1, np.int8))  # output too small
    with pytest.raises(BufferError):
        _native.objects(*column, np.zeros(1, np.int64), 8, b"x")  # read-only output
    outputs = (np.empty(1, np.int8), np.empty(1), np.empty(1, np.uint8), np.empty(1, np.uint8), np.empty(2, np.int32))
    for paths in ((), ((),), (("a",),), ([b"a"],)):
        with pytest.raises((TypeError, ValueError)):
            _native.extract(*column, np.zeros(1, np.int64), paths, np.ones(1, np.uint8), 8, *outputs)


@compiled_only
@settings(max_examples=300, deadline=None)
@given(offsets=st.lists(st.integers(-5, 40), min_size=1, max_size=6), data=st.binary(max_size=30),
       offset=st.integers(-1, 6), length=st.integers(-1, 6), rows=st.lists(st.integers(-2, 6), max_size=6),
       wide=st.booleans())
def test_any_buffers_are_read_within_bounds_or_refused(offsets, data, offset, length, rows, wide):
    from transforms import _native

    column = lying_column(offsets, data, offset, length, wide)
    rows = np.array(rows, np.int64)
    calls = [lambda: _native.objects(*column, rows, 8, np.empty(len(rows), np.int8)),
             lambda: _native.too_deep(*column, rows, 3, np.empty(len(rows), np.uint8)),
             lambda: _native.same(*column, *column, rows, 8, np.empty(len(rows), np.int8)),
             lambda: _native.extract(*column, rows, ((b"a",),), np.ones(len(rows), np.uint8), 8,
                                     np.empty(len(rows), np.int8), np.empty(len(rows)), np.empty(len(rows), np.uint8),
                                     np.empty(len(rows), np.uint8), np.empty(len(rows) + 1, np.int32))]
    for call in calls:
        try:
            call()
        except (IndexError, ValueError):
            pass


# ---------------------------------------------------------------- the switch, the log line, the GIL

def run_python(code: str, **environment) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != jsontext.NATIVE_VARIABLE} | environment
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)


SAYS = ("import logging; logging.basicConfig(level=logging.INFO); "
        "from transforms import jsontext; print(jsontext.native())")


def test_litmus_native_0_forces_the_twin_and_a_log_line_says_which_runs():
    forced = run_python(SAYS, **{jsontext.NATIVE_VARIABLE: "0"})
    assert forced.stdout.strip() == "False" and "JSON texts: pure Python (LITMUS_NATIVE=0)" in forced.stderr
    default = run_python(SAYS)
    if jsontext.available():
        assert default.stdout.strip() == "True" and "JSON texts: compiled (transforms._native)" in default.stderr
    else:
        assert default.stdout.strip() == "False" and "transforms._native is not built" in default.stderr


def test_ci_runs_the_compiled_part_where_it_requires_it():
    if os.environ.get("LITMUS_REQUIRE_NATIVE") != "1":
        pytest.skip("LITMUS_REQUIRE_NATIVE=1 is not set")
    assert jsontext.available()
    assert jsontext.native() or os.environ.get(jsontext.NATIVE_VARIABLE) == "0"


@compiled_only
def test_the_compiled_routines_let_other_threads_run():
    from transforms import _native

    column = jsontext._column(text_array(['{"a": [1, 2.5, "x"], "b": {"c": null}, "note": "' + "x" * 200 + '"}']))
    rows = np.zeros(3_000_000, np.int64)  # the same text, three million times: a long call on little memory
    status, span, ticks = np.empty(len(rows), np.int8), [], []

    def scan():
        start = time.perf_counter()
        _native.objects(*column, rows, 8, status)
        span.extend([start, time.perf_counter()])

    worker = threading.Thread(target=scan)
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    worker.join()
    start, end = span
    # Holding the GIL, the scan would leave this thread no moment in the middle of its run.
    assert any(start + 0.25 * (end - start) < tick < end - 0.25 * (end - start) for tick in ticks)
    assert (status == 1).all()


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS, ids=IDS)
def test_a_path_key_is_matched_as_decoded(compiled):
    # An escaped key is the same key; the last of a repeated key counts.
    items = ['{"\\u0061": 1, "a": 2}', '{"\\u0061": 3}', '{"\\ud800": "s"}', '{"a\\u0000b": true}']
    readers = {path: np.ones(len(items), bool) for path in [("a",), ("\ud800",), ("a\x00b",)]}
    arguments = (ArgumentTexts(text_array(items), np.arange(len(items))) if compiled
                 else ParsedArguments([json.loads(item) for item in items]))
    found = {path: values for path, (values, _) in arguments.columns(readers).items()}
    assert found[("a",)].numbers[:2].tolist() == [2.0, 3.0] and found[("a",)].kinds[2:].tolist() == [0, 0]
    assert found[("\ud800",)].kinds.tolist() == [0, 0, jsontext.STRING, 0]
    assert found[("a\x00b",)].truth.tolist() == [False, False, False, True]


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS, ids=IDS)
def test_an_integer_python_refuses_to_read_makes_malformed_arguments(compiled):
    # json.loads refuses integers longer than sys.get_int_max_str_digits() (4300 by default): not an object.
    from tests import builders as b
    from tests.test_agreement import reference, vectorized

    long = '{"n": ' + "7" * 5000 + "}"
    rows = [b.trajectory("t0", [b.call(arguments=long)]), b.trajectory("t1", [b.call(proposal=b.context(args=long))])]
    with jsontext.implementation(compiled):
        assert jsontext.json_objects(text_array([long, '{"n": ' + "7" * 640 + "}"])).tolist() == [False, True]
        found = vectorized(rows, "commit", 4)
    assert found == reference(rows, "commit")
    both = ["unscored_calls", "malformed_arguments"]
    assert found[1] == {"t0": both, "t1": both}
