"""A job's options make each view once, and every view still reads and writes the same values."""

import pickle

from apache_beam.options.pipeline_options import DirectOptions, StandardOptions, TypeOptions

from pipeline.flags import beam_options
from pipeline.options import JobOptions, ScoreOptions


def test_a_view_is_made_once_per_class():
    options = beam_options(["--runner=FnApiRunner", "--output=/tmp/out"])
    assert isinstance(options, JobOptions)
    assert options.view_as(DirectOptions) is options.view_as(DirectOptions)
    assert options.view_as(StandardOptions).runner == "FnApiRunner"
    assert options.view_as(ScoreOptions).output == "/tmp/out"


def test_what_one_view_sets_every_view_reads():
    options = beam_options(["--runner=FnApiRunner"])
    options.view_as(DirectOptions).direct_num_workers = 3
    options.view_as(TypeOptions).pipeline_type_check = False
    assert options.get_all_options()["direct_num_workers"] == 3
    assert options.view_as(DirectOptions).direct_num_workers == 3
    assert not options.view_as(TypeOptions).pipeline_type_check


def test_pickled_options_carry_their_values_not_their_views():
    options = beam_options(["--runner=FnApiRunner", "--direct_num_workers=2"])
    options.view_as(DirectOptions)
    copy = pickle.loads(pickle.dumps(options))
    assert "_views" not in copy.__dict__
    assert copy.view_as(DirectOptions).direct_num_workers == 2
