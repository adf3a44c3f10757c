"""JSON texts for the tests of transforms.jsontext: values, and texts of them written every way JSON allows.

A value is rendered with its keys in any order, any white space, escapes
where none are needed (`\\u0061`, `\\/`), surrogate pairs written as escapes
or as UTF-8, and now and then a member whose key repeats later (json keeps
the last). `spelled=True` also writes numbers as other spellings of the same
value (1 as `1.0`, `10e-1`); the policy's tests leave it off, since an integer
spelled as a float is a float.
"""

import json
import math

from hypothesis import strategies as st

from transforms import jsontext

# Compiled and pure Python, or pure Python only where the extension is not built or LITMUS_NATIVE=0.
IMPLEMENTATIONS = [True, False] if jsontext.native() else [False]
IDS = ["compiled" if compiled else "twin" for compiled in IMPLEMENTATIONS]


def examples(count: int) -> int:
    """A property test's examples per implementation: `count` in all, whichever run."""
    return max(1, count // len(IMPLEMENTATIONS))

KEYS = ["a", "b", "n", "a.b", "é", "\ud800", ""]
INTEGERS = st.sampled_from([0, 1, -1, 2, 2 ** 53, 2 ** 53 + 1, -(2 ** 53) - 1, 2 ** 63 - 1, 2 ** 63, -(2 ** 63),
                            -(2 ** 63) - 1, 2 ** 64, 10 ** 19, 10 ** 30, -(10 ** 30)]) | st.integers(-3, 3)
FLOATS = st.sampled_from([0.0, -0.0, 1.0, 0.5, 1e300, 1e-320, 2.0 ** 53, 2.0 ** 63, -(2.0 ** 63), 1e22, math.inf,
                          -math.inf, 0.1]) | st.floats(allow_nan=False, allow_infinity=False, width=64)
STRINGS = st.sampled_from(["", "x", "a", "é", "東京", "\ud800", "a\udc00y", "\U0001f600", '"', "\\", "/", "\n\t\x01",
                           "\x7f", "true", "1"]) | st.text(max_size=6)
SCALARS = st.none() | st.booleans() | INTEGERS | FLOATS | STRINGS
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3), max_leaves=10)
OBJECTS = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4)
SPACE = st.sampled_from(["", "", "", " ", "\n", "\t", "\r\n ", "  "])
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def string_literal(draw, text: str) -> str:
    if len(text) > 16:  # escaped as json writes it, or only where JSON must (UTF-8 cannot hold a lone surrogate)
        lone = any(0xD800 <= ord(char) <= 0xDFFF for char in text)
        return json.dumps(text, ensure_ascii=lone or draw(st.booleans()))
    out = []
    for char in text:
        code = ord(char)
        escape = draw(st.integers(0, 5)) == 0
        if char in '"\\' or (char in _SHORT and not escape):
            out.append(_SHORT[char])
        elif char == "/" and escape:
            out.append("\\/")
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF or (escape and code <= 0xFFFF):
            out.append(draw(st.sampled_from(["\\u%04x", "\\u%04X"])) % code)
        elif code > 0xFFFF and escape:
            high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
            out.append(f"\\u{high:04x}\\u{low:04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def number_literal(draw, value, spelled: bool) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "1e400" if value > 0 else "-1e400"
        return draw(st.sampled_from([repr(value), f"{value:.17g}"]))
    if spelled and abs(value) < 2 ** 53 and draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from([f"{value}.0", f"{value}e0", f"{value}E+0"] + ([f"{value}0e-1"] if value else [])))
    return str(value)


@st.composite
def texts_of(draw, value, spelled: bool = False, decoys: bool = True) -> str:
    """A JSON text of `value`."""
    space = draw(SPACE)
    if isinstance(value, dict):
        items = list(value.items())
        order = draw(st.permutations(range(len(items)))) if items else []
        members = []
        for i in order:
            key, item = items[i]
            if decoys and draw(st.integers(0, 9)) == 0:  # a member json overwrites with the later one
                members.append(f"{string_literal(draw, key)}:{draw(texts_of(draw(SCALARS), spelled, decoys))}")
            members.append(f"{string_literal(draw, key)}{draw(SPACE)}:{draw(SPACE)}"
                           f"{draw(texts_of(item, spelled, decoys))}")
        text = "{" + draw(SPACE) + ("," + draw(SPACE)).join(members) + draw(SPACE) + "}"
    elif isinstance(value, list):
        text = "[" + ", ".join(draw(texts_of(item, spelled, decoys)) for item in value) + draw(SPACE) + "]"
    elif value is None or isinstance(value, bool):
        text = json.dumps(value)
    elif isinstance(value, (int, float)):
        text = number_literal(draw, value, spelled)
    else:
        text = string_literal(draw, value)
    return space + text + draw(SPACE)


def utf8(text: str) -> bytes:
    """A text's bytes as the shards hold them (escapes keep every lone surrogate out of the UTF-8)."""
    return text.encode("utf-8")


def nested(depth: int, opening: str = '{"a":', inner: str = "1", closing: str = "}") -> str:
    return opening * depth + inner + closing * depth


DEEP = st.builds(nested, st.integers(1, 300)) | st.builds(lambda d: nested(d, "[", "", "]"), st.integers(1, 300)) \
    | st.builds(lambda d: nested(d, '{"a":[', "{}", "]}"), st.integers(1, 150))
# Texts that are not quite JSON: what a strict parser must refuse (and one it must not: duplicate keys).
ODD = st.sampled_from(["", " ", "{", "}", "{}", "{} {}", "[]", "null", '"x"', "{,}", '{"a":1,}', '{"a" 1}', "{'a': 1}",
                       '{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 01}', '{"a": 1.}', '{"a": .5}',
                       '{"a": 1e}', '{"a": -}', '{"a": +1}', '{"a": tru}', '{"a": nul}', '{"a": "\x01"}',
                       '{"a": "\\x"}', '{"a": "\\u12"}', '{"a": "\\ud800\\u12"}', '{"a": "\\ud800\\u0041"}',
                       '{"a": "\\ud800\\udc00"}', '\ufeff{}', '{"a": 1}x', '{"a":1,"a":2}', '{"a": "unterminated}',
                       '{"a": 1e999999}', '{"a": ' + "9" * 700 + "}", '{"a": 0.' + "1" * 700 + "}",
                       '{"a": -0}', '{"a": 1E+2}', "{\u00a0}", '{"a":\u20281}'])


def plain_text(value) -> str:
    """One JSON text of `value` (compact, ASCII; infinities as 1e400, which json reads as inf)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(key)}:{plain_text(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(plain_text(item) for item in value) + "]"
    if isinstance(value, float) and math.isinf(value):
        return "1e400" if value > 0 else "-1e400"
    return json.dumps(value)
