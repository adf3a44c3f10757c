"""The scan of a .json log finds each sample record and the header exactly as a
whole parse does, however the file is cut into chunks."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from litmus_score.importers.jsonsamples import layout

# Texts that try the scan: quotes, backslashes (runs of them, escaped once
# encoded), brackets and the key's own name inside strings.
texts = st.lists(st.sampled_from(['"', "\\", "[", "]", "{", "}", ",", ":", " ", "a", "é", "\n", "samples"]),
                 max_size=8).map("".join)
values = st.recursive(st.none() | st.booleans() | st.integers() | texts,
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                      max_leaves=12)


@st.composite
def documents(draw):
    """A log-like document: header keys around a samples array (any position, or none)."""
    keys = draw(st.lists(texts.filter(lambda key: key != "samples"), max_size=4, unique=True))
    document = {key: draw(values) for key in keys}
    if draw(st.booleans()):
        document["samples"] = draw(st.lists(st.dictionaries(texts, values, max_size=3) | values, max_size=5))
        order = draw(st.permutations(list(document)))
        document = {key: document[key] for key in order}
    if keys and draw(st.booleans()):
        document[keys[0]] = "samples"  # the key's name as a value
    return document


@settings(max_examples=400, deadline=None)
@given(documents(), st.sampled_from([1, 2, 3, 5, 64, 2**20]), st.booleans(), st.booleans())
def test_the_records_and_header_are_those_a_whole_parse_finds(document, chunk_bytes, ascii_only, indent):
    data = json.dumps(document, ensure_ascii=ascii_only, indent=2 if indent else None).encode()
    found = layout(io.BytesIO(data), chunk_bytes)
    samples = document.pop("samples", [])
    assert [json.loads(data[start:stop]) for start, stop in found.spans] == samples
    assert json.loads(found.header) == document


@settings(max_examples=200, deadline=None)
@given(documents(), st.sampled_from([1, 3, 64]), st.data())
def test_the_samples_key_is_found_however_it_is_escaped(document, chunk_bytes, data):
    """A JSON parser reads `"sampl\\u0065s"` as `samples`: so does the scan."""
    if "samples" not in document:
        document["samples"] = [{"id": 1}]
    escaped = data.draw(st.lists(st.booleans(), min_size=7, max_size=7))
    key = "".join(f"\\u{ord(letter):04x}" if escape else letter for letter, escape in zip("samples", escaped))
    text = json.dumps(document).replace('"samples":', f'"{key}":', 1)
    if '"samples":' in text:  # "samples" also spelled as a key inside a value: not this test's case
        return
    found = layout(io.BytesIO(text.encode()), chunk_bytes)
    assert [json.loads(text.encode()[start:stop]) for start, stop in found.spans] == document.pop("samples")
    assert json.loads(found.header) == document


@pytest.mark.parametrize("data, error", [
    (b'{"status": "success", "samples": [{"id": "unterminated', "ends inside a string"),
    (b'{"samples": [{"id": 1}', "ends inside an object or array"),
    (b'{"samples": [], "samples": [{"id": 1}]}', "two samples arrays"),
    (b'{"samples": []}}', "closes nothing"),
    (b'{"samples": {"a": {"id": 1}}}', "not an array"),
])
def test_a_damaged_document_is_named(data, error):
    with pytest.raises(ValueError, match=error):
        layout(io.BytesIO(data), 4)
