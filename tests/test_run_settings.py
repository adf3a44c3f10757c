"""What a run may choose (pipeline.run_settings): the allow-list both deploy entry points share, the
Airflow DAG's job (pipeline.nightly_job) and the Dataflow Flex Template's (deploy/dataflow/main.py).

The probe's hole: Beam options given by whoever starts a run (`--runner PortableRunner --job_endpoint
embed --environment_type beam:env:harness_subprocess_python:v1 --environment_config LINE`) ran LINE on
the worker. Given as a run's settings the line never runs: refused in one line naming the setting.
Given as the deployer's configuration the same line does run (going on to start Beam's worker), which
shows the mark the refused runs never leave is one a run would leave.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import run_settings, template
from pipeline.flags import known_flags_parser
from pipeline.nightly_job import nightly_argv
from pipeline.options import UsageError
from tests import builders as b
from tests.conftest import load_json

REPO = Path(__file__).resolve().parents[1]
TEMPLATE_MAIN = REPO / "deploy" / "dataflow" / "main.py"
NIGHT = "2026-11-30"
SUBPROCESS_HARNESS = "beam:env:harness_subprocess_python:v1"
# Beam on this machine logs this when it is imported without Google's API client (the [gcp] extra
# brings it); it is Beam's, printed before litmus-score reads a flag.
BEAM_IMPORT_WARNING = "WARNING:root:apitools not found"


def shell_line(tmp_path) -> tuple:
    """(the probe's Beam options, whose harness command is a shell line, and the mark it leaves)."""
    mark = tmp_path / "ran"
    return {"runner": "PortableRunner", "job_endpoint": "embed", "environment_type": SUBPROCESS_HARNESS,
            "environment_config": f"touch {mark}"}, mark


def worker_too(options: dict) -> dict:
    """The options with the shell line going on to start Beam's SDK worker, so the job completes."""
    return {**options, "environment_config": f"{options['environment_config']} && exec {sys.executable} -m "
                                             "apache_beam.runners.worker.sdk_worker_main"}


def refusal(run) -> list:
    """What a refused run said on stderr, less Beam's own import warning."""
    return [line for line in run.stderr.splitlines() if not line.startswith(BEAM_IMPORT_WARNING)]


@pytest.fixture
def shards(tmp_path):
    """runs/NIGHT/x.parquet, three trajectories."""
    (tmp_path / "runs" / NIGHT).mkdir(parents=True)
    b.write_shard(tmp_path / "runs" / NIGHT / "x.parquet",
                  [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()))) for i in range(3)])
    return tmp_path / "runs"


# ---------------------------------------------------------------- the allow-list


def every_other_option() -> list:
    """Every flag Beam 2.77 and litmus-score register (every PipelineOptions subclass, every runner's)
    that is not a run setting: the runner, and every option naming a program, image, endpoint, package."""
    parser = known_flags_parser()
    names = {flag[2:] for action in parser._actions for flag in action.option_strings if flag.startswith("--")}
    return sorted(names - set(run_settings.SETTINGS))


def test_every_other_beam_option_is_refused_by_name():
    others = every_other_option()
    # The audit's names (docs/runners.md) are among them: an allow-list refuses them without listing them.
    assert {"runner", "environment_type", "environment_config", "sdk_container_image", "job_endpoint", "setup_file",
            "requirements_file", "extra_packages", "beam_services", "prebuild_sdk_container_engine",
            "beam_plugins", "profiler_agent", "prism_location"} <= set(others)
    for name in others:
        for command in run_settings.COMMANDS:
            with pytest.raises(UsageError, match=f"^`{name}` is not a run setting: the runner and Beam's options"):
                run_settings.run_flags(command, {name: "x"})


def test_the_docs_list_the_settings_and_the_audited_options():
    """docs/runners.md, "What a run may choose": its table is the allow-list, and each option its audit
    names is one Beam 2.77 registers and a run is refused."""
    section = (REPO / "docs" / "runners.md").read_text().split("## What a run may choose", 1)[1].split("\n## ", 1)[0]
    table, audit = section.split("A run cannot choose", 1)
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    assert sorted(name for row in rows for name in re.findall(r"`(\w+)`", row)) == sorted(run_settings.SETTINGS)
    audited = set(re.findall(r"`([a-z_]+)`", audit.split("Beam 2.77's", 1)[1].split("None is a run setting", 1)[0]))
    options = set(every_other_option())
    assert len(audited) > 60 and audited - {"process_command", "docker_container_image"} <= options


def test_the_run_settings_become_the_commands_flags():
    settings = {"date": NIGHT, "input": "gs://b/runs/{date}/*.parquet", "output_root": "/data/scores",
                "adjudication": "strict", "policy": None, "num_workers": 3, "max_sample_mib": "0.5",
                "identity_attributes": "enduser.id,user.id"}
    assert run_settings.run_flags("nightly", settings) == [
        f"--date={NIGHT}", "--input=gs://b/runs/{date}/*.parquet", "--output_root=/data/scores",
        "--adjudication=strict", "--num_workers=3", "--max_sample_mib=0.5", "--identity_attributes=enduser.id,user.id"]
    # Each command takes its own: nightly chooses its output folder and its baseline.
    assert set(run_settings.settings_of("score")) ^ set(run_settings.settings_of("nightly")) == {
        "output", "baseline", "date", "output_root"}
    with pytest.raises(UsageError, match=r"^`output` is not a setting of nightly, whose are date, input, "):
        run_settings.run_flags("nightly", {"output": "/data/out"})


@pytest.mark.parametrize("name, bad", [
    ("date", "2026-02-30"), ("date", "20261130"), ("input", "runs/*.parquet"), ("input", "/runs\n--runner=x"),
    ("output_root", True), ("adjudication", "COMMIT"), ("input_format", "parquet"), ("batch_rows", "0"),
    ("batch_rows", "1e4"), ("batch_rows", -5), ("num_workers", {"n": 2}), ("max_sample_mib", "0"),
    ("identity_attributes", "a,,b"), ("principal", "agent\x1b[2J"), ("policy", ["/a.yaml"]),
])
def test_a_value_not_of_its_kind_is_refused_by_name(name, bad):
    command = "nightly" if name in ("date", "output_root") else "score"
    with pytest.raises(UsageError, match=f"^`{name}` must be "):
        run_settings.run_flags(command, {name: bad})


# ---------------------------------------------------------------- the DAG's job


def test_the_dags_job_takes_the_deployers_flags_and_the_runs_settings():
    assert nightly_argv(["--runner=DataflowRunner", "--project=p", '--labels={"a": "b"}',
                         '--run_settings={"date": "2026-11-30", "input": "/r/*.parquet", "policy": null}']) == [
        "nightly", "--runner=DataflowRunner", "--project=p", '--labels={"a": "b"}', "--date=2026-11-30",
        "--input=/r/*.parquet"]
    for argv, refused in [(['--run_settings={"runner": "PortableRunner"}'], "`runner` is not a run setting"),
                          (["--run_settings=[1]"], "--run_settings must be a JSON object"),
                          (["--run_settings={"], "--run_settings is not JSON"),
                          (["--run_settings={}", "--run_settings={}"], "--run_settings is given more than once")]:
        with pytest.raises(UsageError, match=f"^{re.escape(refused)}"):
            nightly_argv(argv)


def nightly_job(tmp_path, shards, deployed: list, settings: dict):
    run_settings_json = json.dumps({"date": NIGHT, "input": str(shards / "{date}" / "*.parquet"),
                                    "output_root": str(tmp_path / "scores"), **settings})
    return subprocess.run([sys.executable, "-m", "pipeline.nightly_job", *deployed,
                           f"--run_settings={run_settings_json}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_the_dags_job_refuses_a_program_in_the_runs_settings(tmp_path, shards):
    options, mark = shell_line(tmp_path)
    run = nightly_job(tmp_path, shards, ["--runner=FnApiRunner"], options)
    assert run.returncode == 2
    assert refusal(run) == ["litmus-score: `runner` is not a run setting: the runner and Beam's options are set "
                            "where litmus-score is deployed, never by a run (docs/runners.md)"]
    assert not mark.exists() and not (tmp_path / "scores").exists()


@pytest.mark.slow
def test_the_dags_job_runs_the_deployers_options_and_the_runs_settings(tmp_path, shards):
    options, mark = shell_line(tmp_path)
    deployed = [f"--{name}={value}" for name, value in worker_too(options).items()]
    run = nightly_job(tmp_path, shards, deployed, {"adjudication": "strict", "max_groups": 7})
    assert run.returncode == 0, run.stderr[-2000:]
    assert mark.exists()  # the deployer's harness command ran
    night = tmp_path / "scores" / f"date={NIGHT}"
    assert load_json(night / "metrics.json")["adjudication"] == "strict" and (night / "_SUCCESS").exists()


# ---------------------------------------------------------------- the Flex Template


def test_a_launch_is_the_images_options_the_launch_options_and_the_run_settings():
    environ = {"FLEX_TEMPLATE_PYTHON_SETUP_FILE": "/template/pyproject.toml",
               template.DEPLOYED_OPTIONS: json.dumps({"sdk_container_image": "r/worker:1", "experiments": ["a", "b"],
                                                      "save_main_session": True, "dataflow_kms_key": None})}
    command, argv = template.job_argv(
        ["--command=nightly", "--date", NIGHT, "--input=gs://b/runs/{date}/*.parquet", "--output_root=gs://b/s",
         "--runner=DataflowRunner", "--setup_file=/template/pyproject.toml", "--project=p", "--region=r",
         '--labels={"goog-dataflow-provided-template-type": "flex"}', "--no_use_public_ips", "--num_workers=2"],
        environ)
    assert command == "nightly"
    assert argv == ["--runner=DataflowRunner", "--setup_file=/template/pyproject.toml",
                    "--sdk_container_image=r/worker:1", "--experiments=a", "--experiments=b", "--save_main_session",
                    "--project=p", "--region=r", '--labels={"goog-dataflow-provided-template-type": "flex"}',
                    "--no_use_public_ips", f"--date={NIGHT}", "--input=gs://b/runs/{date}/*.parquet",
                    "--output_root=gs://b/s", "--num_workers=2"]


@pytest.mark.parametrize("argv, environ, refused", [
    # A deployed option with another value than the image's: the launch's own choice.
    (["--setup_file=/tmp/evil/setup.py"], {"FLEX_TEMPLATE_PYTHON_SETUP_FILE": "/template/pyproject.toml"},
     "`setup_file` is not a run setting"),
    (["--runner=PortableRunner"], {}, "`runner` is not a run setting"),
    (["--sdk_container_image=evil/image"], {}, "`sdk_container_image` is not a run setting"),
    (["--input"], {}, "`input` needs a value"),
    (["--project=p\x1b[2J"], {}, "`project` must be printable text on one line"),
    (["input=gs://b/x"], {}, "unexpected argument 'input=gs://b/x'"),
    ([], {template.DEPLOYED_OPTIONS: '{"input": "gs://b/x"}'}, "LITMUS_BEAM_OPTIONS: `input` is a run setting"),
    ([], {template.DEPLOYED_OPTIONS: "--runner=x"}, "LITMUS_BEAM_OPTIONS is not JSON"),
    ([], {template.DEPLOYED_OPTIONS: "[]"}, "LITMUS_BEAM_OPTIONS must be a JSON object"),
])
def test_a_launch_that_asks_for_anything_else_is_refused_by_name(argv, environ, refused):
    with pytest.raises(UsageError, match=f"^{re.escape(refused)}"):
        template.job_argv(argv, environ)


def launch(tmp_path, shards, *params, deployed=None):
    environ = {**os.environ, template.DEPLOYED_OPTIONS: json.dumps(deployed or {"runner": "FnApiRunner"})}
    return subprocess.run([sys.executable, str(TEMPLATE_MAIN), f"--input={shards / NIGHT / '*.parquet'}",
                           f"--output={tmp_path / 'out'}", *params], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_template_refuses_the_shell_line_as_parameters_and_runs_nothing(tmp_path, shards):
    options, mark = shell_line(tmp_path)
    for params, named in [([f"--{name}={value}" for name, value in options.items()], "runner"),
                          ([f"--{name}={value}" for name, value in options.items() if name != "runner"],
                           "job_endpoint")]:
        run = launch(tmp_path, shards, *params)
        assert run.returncode == 2
        assert refusal(run) == [f"litmus-score: `{named}` is not a run setting: the runner and Beam's options are "
                                "set where litmus-score is deployed, never by a run (docs/runners.md)"]
        assert not mark.exists() and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_template_runs_the_images_options_and_the_launchs_settings(tmp_path, shards):
    options, mark = shell_line(tmp_path)
    run = launch(tmp_path, shards, "--adjudication=strict", "--command=score", deployed=worker_too(options))
    assert run.returncode == 0, run.stderr[-2000:]
    assert mark.exists()  # the image's harness command ran
    out = tmp_path / "out"
    assert load_json(out / "metrics.json")["adjudication"] == "strict" and (out / "_SUCCESS").exists()
