"""The stages declare their element types, and Beam checks them where the stages meet.

Pipeline type checking (on by default, and in every test) compares each
stage's declared input with the element type of the PCollection it is
applied to when the graph is built, so a stage wired to the wrong output
fails before any work is launched.
"""

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.typehints.decorators import TypeCheckError

from litmus_score.scoring import contract as c
from pipeline.graph import ScoreTrajectories
from tests import builders as b
from tests.conftest import RUNNER
from transforms.classify import Classify
from transforms.completeness import CheckCompleteness
from transforms.duplicates import Decision, FindDuplicates, SetAsideDuplicates
from transforms.elements import Checked, Resolved, Shard
from transforms.evidence import CollectEvidence, EvidenceCombineFn
from transforms.harness import CompareWithHarness, ReadHarnessVerdicts
from transforms.metrics import ComputeMetrics, RunMetricsCombineFn
from transforms.resolve import ResolveContexts
from transforms.write import WriteOutputs

# What Beam makes of a `dict` hint: a dict of anything.
DOCUMENT = beam.typehints.Dict[beam.typehints.Any, beam.typehints.Any]


def empty(pipeline: beam.Pipeline, element_type, label: str = "Nothing") -> beam.PCollection:
    return pipeline | label >> beam.Create([]).with_output_types(element_type)


DECISIONS = tuple[str, list[Decision]]

# A stage (built in a pipeline, for the side inputs it takes), and elements another stage gives
# that it must refuse.
MISWIRED = {
    "FindDuplicates": (lambda _: FindDuplicates(1024), pa.RecordBatch),  # the batches read, not the shards
    "SetAsideDuplicates": (lambda p: SetAsideDuplicates(empty(p, DECISIONS, "Decisions")), Shard),
    "CheckCompleteness": (lambda _: CheckCompleteness(), Checked),  # its own output, checked again
    "ResolveContexts": (lambda _: ResolveContexts(c.COMMIT), pa.RecordBatch),  # past the completeness check
    "Classify": (lambda _: Classify(c.COMMIT), pa.RecordBatch),
    "ComputeMetrics": (lambda _: ComputeMetrics(c.COMMIT), pa.Table),
    "CollectEvidence": (lambda _: CollectEvidence(), pa.Table),
    "CompareWithHarness": (lambda _: CompareWithHarness(ReadHarnessVerdicts([])), Resolved),
}


@pytest.mark.parametrize("label", MISWIRED)
def test_a_stage_applied_to_the_wrong_elements_fails_when_the_graph_is_built(label):
    stage, wrong = MISWIRED[label]
    pipeline = beam.Pipeline(argv=RUNNER)
    with pytest.raises(TypeCheckError, match=f"Input type hint violation at {label}"):
        empty(pipeline, wrong) | stage(pipeline)


def test_the_writer_checks_each_output_it_is_given_by_name():
    pipeline = beam.Pipeline(argv=RUNNER)
    outputs = {"scored": empty(pipeline, pa.RecordBatch, "Batches"), "unscored": {},
               "metrics": empty(pipeline, dict, "Metrics"), "shard_reports": empty(pipeline, dict, "Reports")}
    with pytest.raises(TypeCheckError, match="Input type hint violation at WriteOutputs input scored"):
        outputs | WriteOutputs("/nowhere", {})


def test_the_duplicates_decisions_reach_their_side_input_typed():
    decisions = empty(beam.Pipeline(argv=RUNNER), Shard) | FindDuplicates(1024)
    assert decisions.element_type == beam.typehints.Tuple[str, beam.typehints.List[Decision]]


@pytest.mark.parametrize("fn", [RunMetricsCombineFn(c.COMMIT), EvidenceCombineFn()])
def test_the_combine_fns_take_and_give_documents(fn):
    pipeline = beam.Pipeline(argv=RUNNER)
    with pytest.raises(TypeCheckError, match=r"requires PCollections of type .*Dict"):
        empty(pipeline, pa.Table, "Tables") | "Combine tables" >> beam.CombineGlobally(fn)
    combined = empty(pipeline, dict, "Documents") | "Combine documents" >> beam.CombineGlobally(fn)
    assert combined.element_type == DOCUMENT


def test_every_seam_of_the_scoring_graph_carries_its_element_type(tmp_path):
    shard = b.write_shard(tmp_path / "part-0.parquet", [b.trajectory(calls=[b.call()])])
    pipeline = beam.Pipeline(argv=RUNNER)
    outputs = pipeline | ScoreTrajectories([shard])
    typed = {key: outputs[key].element_type for key in ("scored", "trajectories", "metrics", "evidence")}
    assert typed == {"scored": pa.Table, "trajectories": pa.Table,
                     "metrics": DOCUMENT, "evidence": DOCUMENT}
    assert {records.element_type for records in outputs["unscored"].values()} == {pa.Table}
    outputs | WriteOutputs(str(tmp_path / "out"), {})  # the writer accepts what the scorer gives
