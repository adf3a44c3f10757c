"""`--runner dask`: Beam's DaskRunner with the fixes litmus-score needs, and fused stages.

Beam 2.77's `apache_beam.runners.dask.dask_runner.DaskRunner` is
experimental (its GroupByKey is known to partition wrongly: apache/beam
issue #29365; the faults below had, when we looked, no issue of their
own), and these faults of its translation break this pipeline:

- bags are keyed by the producing transform, so each tagged output of a
  multi-output ParDo gets all of its outputs, mixed;
- only the last transform's bag is computed, so of several sinks some
  never run;
- a DoFn's finish_bundle outputs are dropped (the Parquet writers emit
  their files there), and side inputs are computed inside the consuming
  task;
- each ParDo is a Dask task of its own: Dask fuses only straight chains,
  and every ParDo here has tagged outputs, so each one's whole output
  (a decoded shard is ~95 MiB) waits in worker memory for the next.

This runner translates Create, GroupByKey and Flatten with Beam's own ops,
and fuses ParDos into stages as Beam's own runners do: a ParDo joins the
stage of the ParDo whose output is its main input, unless one of its side
inputs is computed from that stage. A stage runs as one Dask task per
partition of its first ParDo's input, one bundle of each member: a value
goes straight from the member that emits it to the members that read it,
finish_bundle runs in the order the members were applied (so what a writer
emits there reaches its consumers), and only the PCollections read outside
the stage (by a GroupByKey, a Flatten, a side input) are kept, keyed by
PCollection. A shard is thus read, scored and written in one task, which
starts once its side inputs (the duplicate decisions) exist and whose
memory does not grow with the input. CombinePerKey is lifted, as Beam's
DirectRunner lifts it: each bundle combines its values, and only the
accumulators are grouped. Every leaf is computed. For speed
each created element (a shard file) gets its own partition, groupings read
fewer partitions, and Dask's scheduler is told how many bytes a partition
holds. Without `--dask_client_address` it starts a LocalCluster on loopback
with one single-threaded worker process per core (`--dask_local_workers N`
to choose), and closes it when the job ends. Its workers keep glibc's own
malloc tuning: the MALLOC_TRIM_THRESHOLD_ Dask's nanny sets fixes glibc's
mmap threshold too, and every large buffer (a decompressed sample, a parsed
record) is then mapped and unmapped anew; an import ran 1.55x slower.
`tests/test_dask.py` fails when Beam's own runner stops needing this.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import sys
from collections.abc import Callable
from typing import Any

try:
    import cloudpickle
    import dask
    import dask.bag
    import dask.distributed as ddist
    import dask.sizeof
except ImportError:
    raise ImportError("--runner dask needs Dask: pip install 'litmus-score[dask]'") from None
from apache_beam import pvalue
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import PipelineVisitor, PTransformOverride
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, Receiver, _OutputHandler
from apache_beam.runners.dask import dask_runner as beam_dask
from apache_beam.runners.dask.overrides import dask_overrides
from apache_beam.runners.dask.transform_evaluator import (
    TRANSLATIONS,
    DaskBagOp,
    Flatten,
    GroupByKey,
    NoOp,
    get_windowed_value,
)
from apache_beam.transforms.combiners import LiftedCombinePerKey
from apache_beam.transforms.core import CombinePerKey, DoFn, ParDo
from apache_beam.transforms.sideinputs import SideInputMap


class _Forward(Receiver):
    """One output of a stage's member: into the members that read it, and kept (by key) if read outside."""

    def __init__(self, consumers, kept, key):
        self._consumers, self._kept, self._key = consumers, kept, key

    def receive(self, windowed_value):
        for consumer in self._consumers:
            consumer.invoke_process(windowed_value)
        if self._key is not None:
            self._kept.append((self._key, windowed_value.value))


class _Discard(Receiver):
    def receive(self, windowed_value):
        pass


class _Receivers(dict):
    """A member's receivers by output tag; as in Beam, a tag nobody reads is discarded."""

    def __missing__(self, tag):
        return _Discard()


@dataclasses.dataclass
class _Member:
    """What a stage's task needs of one ParDo: its DoFn and where each output goes."""

    fn: DoFn
    label: str
    window_fn: object
    args: tuple
    kwargs: dict
    side_inputs: list  # (index among the stage's side inputs, view type, view options, window mapping)
    outputs: dict  # tag -> (indices of the members that read it, key it is kept under outside or None)


def run_stage(items, pickled_members: bytes, side_values) -> _Partition:
    """One partition through a fused stage, one bundle per member: [(kept output's key, value)]."""
    # Each task unpickles its own DoFns, as each Beam bundle processor does:
    # a DoFn instance is never shared by two bundles running at once.
    members = pickle.loads(pickled_members)
    kept: list = []
    invokers: list[Any] = [None] * len(members)  # each set before it is called: consumers first
    for i in reversed(range(len(members))):  # consumers first: a member's receivers call them
        member = members[i]
        receivers = _Receivers({
            tag: _Forward([invokers[j] for j in consumers], kept, key)
            for tag, (consumers, key) in member.outputs.items()
        })
        handler = _OutputHandler(
            window_fn=member.window_fn, main_receivers=receivers[None], tagged_receivers=receivers,
            per_element_output_counter=None, output_batch_converter=None,
            process_yields_batches=False, process_batch_yields_elements=False,
        )
        side_inputs = [
            SideInputMap(view_type, options, [get_windowed_value(v, mapping) for v in side_values[index]])
            for index, view_type, options, mapping in member.side_inputs
        ]
        invokers[i] = DoFnInvoker.create_invoker(
            DoFnSignature(member.fn), handler, context=DoFnContext(member.label, state=None),
            side_inputs=side_inputs, input_args=member.args, input_kwargs=member.kwargs,
            user_state_context=None, bundle_finalizer_param=DoFn.BundleFinalizerParam(),
        )
    for invoker in invokers:
        invoker.invoke_setup()
        invoker.invoke_start_bundle()
    for item in items:
        invokers[0].invoke_process(get_windowed_value(item, members[0].window_fn))
    for invoker in invokers:  # in the order applied: what a member emits here reaches open bundles
        invoker.invoke_finish_bundle()
    for invoker in invokers:
        invoker.invoke_teardown()
    return _sized(kept)


class _Partition(list):
    """A partition's elements and their size. Dask's scheduler places a task
    by the bytes it would move, and cannot see the Arrow data inside our
    elements: undersized, a partition is moved to an idle worker whole."""

    nbytes = 0


@dask.sizeof.sizeof.register(_Partition)
def _partition_size(partition) -> int:
    return partition.nbytes


def _nbytes(value) -> int:
    if hasattr(value, "nbytes"):  # Arrow tables and batches, numpy arrays
        return int(value.nbytes)
    if dataclasses.is_dataclass(value):
        return sum(_nbytes(getattr(value, field.name)) for field in dataclasses.fields(value))
    if isinstance(value, (tuple, list)):
        return sum(map(_nbytes, value))
    return sys.getsizeof(value)


def _sized(values) -> _Partition:
    partition = _Partition(values)
    partition.nbytes = _nbytes(partition)
    return partition


def _kept_as(partition, key) -> _Partition:
    """One kept output's values, from a stage's (key, value) outputs."""
    return _sized([value for output_key, value in partition if output_key == key])


def _concatenated(partitions) -> list:
    return [value for partition in partitions for value in partition]


def _drain(partition) -> list:
    """Runs a leaf's partition without sending its elements to the client."""
    for _ in partition:
        pass
    return []


# Beam's GroupByKey shuffles into as many partitions as it reads, and
# Flatten adds its inputs' partitions up: the shuffle's tasks grow as the
# square of its partitions, for inputs here that are small (the global
# combines of statistics and file lists).
PARTITIONS_PER_GROUPING_PARTITION = 8


def _fewer_partitions(bag):
    return bag.repartition(npartitions=math.ceil(bag.npartitions / PARTITIONS_PER_GROUPING_PARTITION))


def _inputs(node) -> list:
    return [value for value in node.inputs if not isinstance(value, pvalue.PBegin)] + [
        side.pvalue for side in node.side_inputs]


class _Stage:
    """ParDos fused into one task per partition of the first one's main input."""

    def __init__(self, main_input):
        self.main_input = main_input
        self.members = []  # applied ParDos, in the order applied

    def side_inputs(self) -> list:
        return list(dict.fromkeys(side.pvalue for member in self.members for side in member.side_inputs))


class _Stages(PipelineVisitor):
    """Plans the stages (see the module's docstring) and translates the pipeline into Dask bags."""

    def __init__(self, bag_kwargs: dict):
        self._bag_kwargs = bag_kwargs
        self._producer: dict = {}  # PCollection -> applied transform
        self._stage: dict = {}  # applied ParDo -> its _Stage
        self._readers: dict = {}  # PCollection -> applied transforms that read it (main or side input)
        self._bags: dict = {}  # PCollection -> dask Bag
        self._tasks: dict = {}  # _Stage -> its dask Bag of kept outputs

    def visit_transform(self, node) -> None:
        for value in _inputs(node):
            self._readers.setdefault(value, []).append(node)
        self._producer.update((pcoll, node) for pcoll in node.outputs.values())
        # By exact class, as Beam translates: its GroupByKey op already
        # yields what GroupAlsoByWindow (a ParDo subclass) would.
        if type(node.transform) is ParDo:
            (main_input,) = node.main_inputs.values()
            stage = self._stage.get(self._producer.get(main_input))
            if stage is None or any(self._computed_from(side.pvalue, stage) for side in node.side_inputs):
                stage = _Stage(main_input)
            stage.members.append(node)
            self._stage[node] = stage

    def _computed_from(self, pcoll, stage) -> bool:
        """Whether `pcoll` is computed from `stage` (as a side input of a member, the task would wait on itself)."""
        seen, todo = set(), [pcoll]
        while todo:
            node = self._producer.get(todo.pop())
            unit = self._stage.get(node, node)
            if unit is stage:
                return True
            if node is None or unit in seen:
                continue
            seen.add(unit)
            todo += [unit.main_input, *unit.side_inputs()] if isinstance(unit, _Stage) else _inputs(node)
        return False

    def _fused_readers(self, pcoll, stage: _Stage) -> list:
        """The members of `stage` whose main input is `pcoll`: its values go straight to them."""
        return [reader for reader in self._readers.get(pcoll, [])
                if self._stage.get(reader) is stage and pcoll in reader.main_inputs.values()]

    def _kept(self, stage: _Stage) -> list:
        """The stage's outputs that are read outside it (by another transform, or as a side input)."""
        return [pcoll for member in stage.members for pcoll in member.outputs.values()
                if len(self._fused_readers(pcoll, stage)) < len(self._readers.get(pcoll, []))]

    def _bag(self, pcoll):
        if pcoll not in self._bags:
            node = self._producer[pcoll]
            if node in self._stage:
                stage = self._stage[node]
                self._bags[pcoll] = self._task(stage).map_partitions(_kept_as, self._kept(stage).index(pcoll))
            else:
                self._translate(node)
        return self._bags[pcoll]

    def _translate(self, node) -> None:
        # Beam's table types its values as the abstract base; each is a concrete op.
        translation: Callable[..., DaskBagOp] = TRANSLATIONS.get(node.transform.__class__, NoOp)
        op = translation(node, bag_kwargs=self._bag_kwargs)
        bag_inputs = [self._bag(value) for value in _inputs(node)]
        if isinstance(op, GroupByKey):
            bag_inputs = [_fewer_partitions(bag_inputs[0])]
        bag = op.apply(bag_inputs if isinstance(op, Flatten) else (bag_inputs[0] if bag_inputs else None))
        for pcoll in node.outputs.values():
            self._bags[pcoll] = bag

    def _task(self, stage: _Stage):
        """The stage's bag of (kept output's key, value), one task per partition."""
        if stage not in self._tasks:
            kept, sides = self._kept(stage), stage.side_inputs()
            index = {member: i for i, member in enumerate(stage.members)}
            members = []
            for member in stage.members:
                (main_input,) = member.main_inputs.values()
                members.append(_Member(
                    member.transform.fn, member.transform.label, main_input.windowing.windowfn,
                    member.transform.args, member.transform.kwargs,
                    [(sides.index(side.pvalue), type(side), side._view_options(), side._window_mapping_fn)
                     for side in member.side_inputs],
                    {tag: ([index[reader] for reader in self._fused_readers(pcoll, stage)],
                           kept.index(pcoll) if pcoll in kept else None)
                     for tag, pcoll in member.outputs.items()},
                ))
            # Whole side inputs, computed before the task that reads them, from
            # the bags' own partitions: a bag made Delayed whole is optimized on
            # its own, and its upstream tasks renamed and run again (each
            # CombineGlobally's default-value side input ran the whole job again).
            side_values = dask.delayed(list)([
                dask.delayed(_concatenated)(self._bag(side).to_delayed(optimize_graph=False)) for side in sides
            ])
            self._tasks[stage] = self._bag(stage.main_input).map_partitions(
                run_stage, cloudpickle.dumps(members), side_values)
        return self._tasks[stage]

    def leaves(self) -> list:
        """A bag of each stage or transform that nothing reads from: computing them runs the whole pipeline."""
        leaves = []
        for unit in dict.fromkeys(self._stage.get(node, node) for node in self._producer.values()):
            if isinstance(unit, _Stage):
                if not self._kept(unit):
                    leaves.append(self._task(unit))
            else:
                leaves += [self._bag(pcoll) for pcoll in unit.outputs.values() if not self._readers.get(pcoll)]
        return leaves


class _LiftedCombines(PTransformOverride):
    """CombinePerKey as Beam's DirectRunner runs it: a combine in each bundle,
    then a GroupByKey of the accumulators, and their merge. Unlifted, every
    value waits for the grouping (each batch's evidence cases: ~13 MiB
    pickled per million calls), and a worker's memory grows with the input."""

    def matches(self, applied_ptransform) -> bool:
        return (isinstance(applied_ptransform.transform, CombinePerKey)
                and applied_ptransform.inputs[0].windowing.is_default())

    def get_replacement_transform_for_applied_ptransform(self, applied_ptransform):
        transform = applied_ptransform.transform
        try:
            return LiftedCombinePerKey(transform.fn, transform.args, transform.kwargs)
        except NotImplementedError:  # ten side inputs or more
            return transform


class LocalClusterOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--dask_local_workers", type=int, default=None,
            help="Without --dask_client_address: worker processes of the LocalCluster (default: one per core).",
        )


class DaskRunner(beam_dask.DaskRunner):
    """Runs a pipeline on Dask distributed (see the module's docstring)."""

    def run_pipeline(self, pipeline, options):

        dask_options = options.view_as(beam_dask.DaskOptions).get_all_options(drop_default=True, current_only=True)
        # Create's elements here are shard files, each a large unit of work:
        # one partition each, unless the user sized the partitions.
        bag_kwargs = beam_dask.DaskOptions._extract_bag_kwargs(dask_options) or {"partition_size": 1}
        cluster = None
        if not dask_options.get("address") and not dask_options.get("scheduler_file"):
            # None unsets it (distributed.nanny._get_env_variables): see the module's docstring.
            with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
                cluster = ddist.LocalCluster(
                    n_workers=options.view_as(LocalClusterOptions).dask_local_workers or os.cpu_count() or 1,
                    threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                )
            dask_options["address"] = cluster
        client = ddist.Client(**dask_options)
        pipeline.replace_all([_LiftedCombines(), *dask_overrides()])
        visitor = _Stages(bag_kwargs)
        pipeline.visit(visitor)
        # One collection, so that Dask optimizes the graph as a whole: each
        # collection is optimized on its own, and a task that two collections
        # share would be fused into each, under two names, and run twice.
        job = dask.bag.concat([leaf.map_partitions(_drain) for leaf in visitor.leaves()])
        return DaskRunnerResult(client, [client.compute(job)], cluster)


class DaskRunnerResult(beam_dask.DaskRunnerResult):
    """Beam's result, which also closes the client (and the LocalCluster it started) when the job ends."""

    def __init__(self, client, futures, cluster=None):
        super().__init__(client, futures)
        self._cluster = cluster

    def wait_until_finish(self, duration=None) -> str:
        try:
            return super().wait_until_finish(duration)
        finally:
            self.client.close()
            if self._cluster is not None:
                self._cluster.close()
