"""The Dataflow Flex Template (deploy/dataflow): the package the workers get, and the parameters.

The image itself is not built here (no container engine); what it ships is.
"""

import argparse
import fcntl
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.stager import Stager

from litmus_score.scoring import contract as c
from pipeline import run_settings, template
from pipeline.options import ScoreOptions, UsageError, validate
from tests import builders as b
from tests.conftest import RUNNER, load_json
from transforms import jsontext

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "deploy" / "dataflow"
# The import names a wheel installs, and every package folder under them.
TOP_LEVEL = {"pipeline", "transforms", "litmus_score"}
# The image's Beam options for a run on this machine: the runner is the deployer's, never a parameter.
DEPLOYED_HERE = {**os.environ, template.DEPLOYED_OPTIONS: json.dumps({"runner": RUNNER[1]})}
PACKAGES = sorted(str(init.parent.relative_to(REPO))
                  for name in TOP_LEVEL for init in (REPO / name).rglob("__init__.py"))


def metadata() -> dict:
    return json.loads((TEMPLATE / "metadata.json").read_text())


def cli_options() -> dict:
    """litmus-score's own score options: flag name -> argparse action."""
    parser = argparse.ArgumentParser()
    ScoreOptions._add_argparse_args(parser)
    return {action.option_strings[0][2:]: action for action in parser._actions if action.option_strings[0] != "-h"}


def modules_of(names) -> set:
    return {name for name in names if name.endswith(".py")}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    """The sdist exactly as Beam's stager builds it for --setup_file (python -m build --no-isolation --sdist)."""
    out = tmp_path_factory.mktemp("sdist")
    # pytest -n: each worker builds its own, one at a time, since builds in one tree share its egg-info.
    with open(tmp_path_factory.getbasetemp().parent / "sdist.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return Path(Stager._build_setup_package(str(REPO / "pyproject.toml"), str(out)))


@pytest.mark.slow
def test_the_sdist_carries_every_module_the_workers_import(sdist):
    import pipeline.cli
    import pipeline.graph

    ours = {Path(module.__file__).relative_to(REPO).parts[0] for module in list(sys.modules.values())
            if getattr(module, "__file__", None) and Path(module.__file__).is_relative_to(REPO)}
    ours = {part.removesuffix(".py") for part in ours if not part.startswith(".") and part != "tests"}
    # Every package the job imports is one the sdist ships (the importers load only for `import`).
    assert ours <= TOP_LEVEL
    with tarfile.open(sdist) as archive:
        root = archive.getnames()[0].split("/")[0]
        members = {name.removeprefix(root + "/") for name in archive.getnames()}
    expected = {f"{package}/{path.name}" for package in PACKAGES for path in (REPO / package).glob("*.py")}
    assert expected <= members
    # What pip needs to install it on a worker: the build configuration and the readme it names,
    # and the compiled part's source with the setup.py that builds it (transforms/jsontext.py).
    assert {"pyproject.toml", "setup.py", "README.md", "PKG-INFO", "transforms/_native.c"} <= members
    # Nothing built here rides along: a worker compiles for its own platform.
    assert not [name for name in members if name.endswith((".so", ".pyd"))]


@pytest.mark.slow
def test_a_worker_can_install_the_sdist(sdist, tmp_path):
    # A Dataflow worker pip-installs the staged sdist (its dependencies are in the SDK image already):
    # build its wheel the same way, in pip's isolated build environment.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path),
                    str(sdist)], check=True)
    (wheel,) = tmp_path.glob("litmus_score-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    expected = {f"{package}/{path.name}" for package in PACKAGES for path in (REPO / package).glob("*.py")}
    assert expected <= modules_of(names)
    # Installed, it adds no import name but these three: none another distribution could own.
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == TOP_LEVEL
    requires = [line for line in zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA")))
                .decode().splitlines() if line.startswith("Requires-Dist: apache-beam")]
    assert requires and "2.77.0" in requires[0]
    # The compiled part, built from the sdist as a worker builds it (here, where this checkout's is built too).
    compiled = [name for name in names if name.startswith("transforms/_native.") and name.endswith((".so", ".pyd"))]
    assert compiled if jsontext.available() else not compiled
    assert "transforms/_native.c" not in names


@pytest.mark.slow
def test_without_a_compiler_the_sdist_installs_the_twin(sdist, tmp_path):
    # The extension is optional: where it cannot be built the wheel has none, and transforms.jsontext
    # runs its pure-Python twin (tests/test_jsontext.py checks the log line that says so).
    environment = {**os.environ, "CC": "false", "LDSHARED": "false"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir", "--wheel-dir",
                    str(tmp_path), str(sdist)], check=True, env=environment)
    (wheel,) = tmp_path.glob("litmus_score-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "transforms/jsontext.py" in names
    # No compiled module (its type stub, transforms/_native.pyi, ships either way).
    assert not [name for name in names if name.startswith("transforms/_native.") and name.endswith((".so", ".pyd"))]


def nightly_options() -> dict:
    """nightly's own flags that a template run sets (--input is score's too): name -> action."""
    from pipeline.nightly import _parser

    return {action.dest: action for action in _parser()._actions if action.dest in ("date", "output_root")}


def import_options() -> dict:
    """The flags of score --input_format and nightly --input_format that name the logs' format and how they
    are imported: name -> action."""
    from pipeline.nightly import _parser

    return {action.dest: action for action in _parser()._actions
            if action.dest not in ("date", "output_root", "inputs", "help")}


def test_every_template_parameter_is_a_cli_option_and_every_cli_option_a_parameter():
    # A flag without a value (--replace) cannot be one: the launcher passes --name=value.
    parameters = {p["name"]: p for p in metadata()["parameters"]}
    valued = {name for name, action in cli_options().items() if action.nargs != 0}
    assert "input_format" in import_options()
    assert set(parameters) == valued | set(nightly_options()) | set(import_options()) | {"command"}
    assert {f"--{name}" for name in nightly_options()} <= {
        flag for action in nightly_options().values() for flag in action.option_strings}
    # And the run settings a launch may set (pipeline.run_settings), but the worker counts, which
    # are the launch's own (--num-workers, --max-workers).
    assert set(parameters) == set(run_settings.SETTINGS) - {"num_workers", "max_num_workers"} | {"command"}
    for parameter in parameters.values():
        assert parameter["label"] and len(parameter["helpText"]) > 20
        assert parameter["regexes"] and all(re.compile(r) for r in parameter["regexes"])


def test_the_required_cli_options_are_the_required_parameters(tmp_path):
    # Required is what validate() refuses to go without; found by leaving out each option in turn.
    given = {"input": str(tmp_path / "*.parquet"), "output": str(tmp_path / "out")}
    validate(PipelineOptions([f"--{name}={value}" for name, value in given.items()]))
    required = set()
    for name in given:
        try:
            validate(PipelineOptions([f"--{n}={v}" for n, v in given.items() if n != name]))
        except UsageError as error:
            assert "is required" in str(error)
            required.add(name)
    assert required == set(given)
    # Both commands need --input; --output is score's (nightly chooses it under output_root).
    optional = {p["name"] for p in metadata()["parameters"] if p.get("isOptional")}
    assert {p["name"] for p in metadata()["parameters"]} - optional == {"input"}
    output = next(p for p in metadata()["parameters"] if p["name"] == "output")
    assert "Required for command=score" in output["helpText"]


@pytest.mark.parametrize("name, good, bad", [
    ("input", ["gs://b/runs/2026-11-30/*.parquet", "gs://b/runs/{date}/*.parquet"], ["runs/*.parquet",
                                                                                     "gs://b/x\n--runner=evil"]),
    ("output", ["gs://b/scores/2026-11-30"], ["/tmp/out"]),
    ("adjudication", list(c.MODES), ["COMMIT", "commit "]),
    ("batch_rows", ["1", "16384"], ["0", "-5", "1e4"]),
    ("policy", ["/template/configs/policy.yaml", "gs://b/p.yml"], ["policy.json", "configs/policy.yaml"]),
    ("baseline", ["gs://b/scores/2026-11-29"], ["scores/2026-11-29"]),
    ("thresholds", ["/template/configs/thresholds.yaml"], ["t.txt", "t.yaml"]),
    ("max_json_depth", ["1", "64"], ["0", "deep"]),
    ("command", ["score", "nightly"], ["import", "nightly --replace"]),
    ("input_format", ["inspect", "otel", "scout"], ["parquet", "otel --replace"]),
    ("identity_attributes", ["enduser.id", "acme.user_id,user.id"], ["a,,b", "user.id\n--runner=evil"]),
    ("date", ["2026-12-01"], ["20261201", "2026-12-01T00:00"]),
    ("output_root", ["gs://b/scores"], ["scores"]),
])
def test_the_validation_regexes(name, good, bad):
    (regex,) = next(p for p in metadata()["parameters"] if p["name"] == name)["regexes"]
    assert all(re.fullmatch(regex, value) for value in good)
    assert not any(re.fullmatch(regex, value) for value in bad)


def dockerignored(patterns: list, path: str) -> bool:
    """Whether the build context leaves `path` out, by Docker's rules: the last
    pattern that matches the path or one of its parent folders decides; `*`
    stays within a path segment, `**` spans any number of them, `!` lets back in."""
    def matches(pattern: str, candidate: str) -> bool:
        regex, rest = "", pattern
        if rest.startswith("**/"):
            regex, rest = "(.*/)?", rest[3:]
        for piece in re.split(r"(\*\*|\*|\?)", rest):
            regex += {"**": ".*", "*": "[^/]*", "?": "[^/]"}.get(piece, re.escape(piece))
        return re.fullmatch(regex, candidate) is not None

    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if any(matches(pattern.lstrip("!"), candidate) for candidate in candidates):
            excluded = not negated
    return excluded


def build_context() -> set:
    """The files `docker build -f deploy/dataflow/Dockerfile .` sends from this checkout."""
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    files = (str(path.relative_to(REPO)) for path in REPO.rglob("*") if path.is_file() and ".git" not in path.parts[
        len(REPO.parts):len(REPO.parts) + 1])
    return {path for path in files if not dockerignored(patterns, path)}


def test_the_docker_rules_as_the_test_reads_them():
    rules = ["*", "!pkg", "!deploy/x/main.py", "**/__pycache__"]
    assert dockerignored(rules, ".venv/lib/site.py") and dockerignored(rules, "README.md")
    assert not dockerignored(rules, "pkg/a/b.py") and dockerignored(rules, "pkg/a/__pycache__/b.pyc")
    assert not dockerignored(rules, "deploy/x/main.py") and dockerignored(rules, "deploy/x/other.py")


def test_the_image_gets_every_file_of_the_packages_and_nothing_else():
    context = build_context()
    # What the sdist is built from: the configuration, the readme it names, every file of the packages.
    # (less the compiled part an editable install built here: the image builds its own from setup.py).
    packaged = {str(path.relative_to(REPO)) for package in TOP_LEVEL for path in (REPO / package).rglob("*")
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".so"}
    assert packaged <= context
    configs = {str(path.relative_to(REPO)) for path in (REPO / "configs").iterdir()}
    assert context == packaged | configs | {"pyproject.toml", "setup.py", "README.md", "deploy/dataflow/main.py"}
    # Was: no .dockerignore, and the ~1 GB .venv sent with every build.
    assert not [path for path in context if path.startswith((".venv", "tests/", "docs/", ".hypothesis"))]
    # Everything the Dockerfile copies is in the context.
    copied = [line.split()[1:-1] for line in (TEMPLATE / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ")]
    for sources in copied:
        for source in sources:
            assert source in context or any(path.startswith(source) for path in context), source


def test_the_build_and_launch_commands_are_valid_for_gcloud():
    build = yaml.safe_load((TEMPLATE / "cloudbuild.yaml").read_text())
    (step,) = build["steps"]
    assert step["args"][:3] == ["build", "-f", "deploy/dataflow/Dockerfile"] and (REPO / step["args"][2]).exists()
    assert build["images"] == ["${_IMAGE}"] and "${_IMAGE}" in step["args"]
    runners = (REPO / "docs" / "runners.md").read_text()
    commands = [" ".join(block.replace("\\\n", " ").split()) for block in re.findall(r"```sh\n(.*?)```", runners, re.S)]
    submits = [line for block in commands for line in block.split("gcloud ")[1:] if line.startswith("builds submit")]
    # gcloud builds submit takes one of --config, --pack and --tag (its synopsis: a mutually exclusive group).
    assert submits and all(sum(f"--{flag}" in line for flag in ("config", "pack", "tag")) == 1 for line in submits)
    flex = " ".join(commands)
    assert "gcloud dataflow flex-template build gs://" in flex
    assert "--metadata-file deploy/dataflow/metadata.json" in flex
    assert "gcloud dataflow flex-template run" in flex and "--template-file-gcs-location" in flex
    assert "command=nightly" in flex


def test_the_image_runs_the_entry_point_with_the_setup_file():
    dockerfile = (TEMPLATE / "Dockerfile").read_text()
    assert dockerfile.startswith("#")
    assert "FROM gcr.io/dataflow-templates-base/python311-template-launcher-base" in dockerfile
    assert "FLEX_TEMPLATE_PYTHON_PY_FILE=/template/main.py" in dockerfile
    assert "FLEX_TEMPLATE_PYTHON_SETUP_FILE=/template/pyproject.toml" in dockerfile
    for copied in ["pyproject.toml setup.py README.md", *[f"{package}/" for package in sorted(TOP_LEVEL)], "configs/",
                   "deploy/dataflow/main.py"]:
        assert f"COPY {copied}" in dockerfile


@pytest.mark.slow
def test_the_entry_point_submits_and_the_job_publishes_itself(tmp_path):
    # What the launcher runs: python main.py --input=... --output=..., in an image whose Beam options
    # name the runner. On FnApiRunner the submission runs the job, whose last step publishes the run.
    b.write_shard(tmp_path / "x.parquet", [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()))) for i in range(3)])
    run = subprocess.run([sys.executable, str(TEMPLATE / "main.py"), f"--input={tmp_path / 'x.parquet'}",
                          f"--output={tmp_path / 'out'}", "--adjudication=strict"], cwd=tmp_path,
                         env=DEPLOYED_HERE, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "the job publishes" in run.stdout
    out = tmp_path / "out"
    metrics = load_json(out / "metrics.json")
    assert metrics["adjudication"] == "strict" and metrics["totals"]["trajectories"]["input"] == 3
    assert (out / "_SUCCESS").exists() and (out / "report.html").exists() and not (out / ".lock").exists()
    assert "report.html" in {entry["path"] for entry in load_json(out / "manifest.json")["outputs"]}


@pytest.mark.slow
def test_the_template_runs_nightly(tmp_path):
    for night in ("2026-11-30", "2026-12-01"):
        (tmp_path / "runs" / night).mkdir(parents=True)
        b.write_shard(tmp_path / "runs" / night / "x.parquet",
                      [b.trajectory(f"t{i}", b.calls_of(("allow", b.commit()))) for i in range(3)])
    argv = [sys.executable, str(TEMPLATE / "main.py"), "--command=nightly",
            f"--input={tmp_path / 'runs' / '{date}' / '*.parquet'}", f"--output_root={tmp_path / 'scores'}"]
    for night in ("2026-11-30", "2026-12-01"):
        run = subprocess.run([*argv, f"--date={night}"], cwd=tmp_path, env=DEPLOYED_HERE, capture_output=True,
                             text=True)
        assert run.returncode == 0, run.stderr[-2000:]
    night = tmp_path / "scores" / "date=2026-12-01"
    assert load_json(night / "manifest.json")["night"]["date"] == "2026-12-01"
    comparison = load_json(night / "comparison.json")
    assert comparison["baseline"]["folder"] == str(tmp_path / "scores" / "date=2026-11-30")
    assert (night / "_SUCCESS").exists() and not (night / ".lock").exists()
