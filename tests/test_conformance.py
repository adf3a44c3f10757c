"""The conformance set of scoring-v1, scored through the CLI in every mode."""

import math
import os
from pathlib import Path

import pytest

from litmus_score.scoring import contract as c
from tests.conftest import load_json

CONFORMANCE = Path(os.environ.get(
    "LITMUS_CONFORMANCE", Path(__file__).resolve().parents[2] / "shared" / "spec" / "conformance"))

pytestmark = pytest.mark.skipif(not CONFORMANCE.is_dir(), reason=f"no conformance set at {CONFORMANCE}")


def differences(actual, expected, path="$"):
    """Field-by-field differences as the conformance README defines them."""
    if isinstance(expected, dict):
        out = []
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{path}.{key}: absent")
            else:
                out += differences(actual[key], value, f"{path}.{key}")
        # metrics.json holds "at least" the spec's fields, so other fields are
        # fine; but in a map of counts, a count the expected side lacks must be 0.
        if path.endswith((".by_category", ".unscored_by_reason")):
            out += [f"{path}.{k}: unexpected {v}" for k, v in actual.items() if k not in expected and v != 0]
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: {actual!r} != {expected!r}"]
        return [d for i, (a, e) in enumerate(zip(actual, expected)) for d in differences(a, e, f"{path}[{i}]")]
    if isinstance(expected, float) and not isinstance(actual, bool) and isinstance(actual, (int, float)):
        return [] if math.isclose(actual, expected, rel_tol=1e-9, abs_tol=0.0) else [f"{path}: {actual} != {expected}"]
    return [] if actual == expected and type(actual) is type(expected) else [f"{path}: {actual!r} != {expected!r}"]


@pytest.mark.parametrize("mode", c.MODES)
def test_conformance(score_cli, mode):
    code, output = score_cli([CONFORMANCE / "shards" / "*.parquet"], "--adjudication", mode)
    assert code == 0
    expected = load_json(CONFORMANCE / f"expected-{mode}.json")
    assert differences(load_json(output / "metrics.json"), expected) == []


def test_differences_notices_a_changed_count():
    assert differences({"a": {"n": 1, "r": 0.5}}, {"a": {"n": 2, "r": 0.5}}) == ["$.a.n: 1 != 2"]
    assert differences({"r": 0.5000001}, {"r": 0.5}) == ["$.r: 0.5000001 != 0.5"]
    assert differences({"by_category": {"misuse": 0}}, {"by_category": {}}) == []
    assert differences({"by_category": {"misuse": 1}}, {"by_category": {}}) == ["$.by_category.misuse: unexpected 1"]
    assert differences({"extra_field": [1]}, {}) == []
