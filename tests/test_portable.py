"""The portable path (what Dataflow Runner v2, Flink and Spark run): Beam's job
service and an external SDK worker pool, in separate processes. The pipeline
proto, the Arrow coders and every DoFn cross a process boundary, as on a cloud
runner; the run must equal FnApiRunner's."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import main
from tests.conftest import RUNNER, load_json
from tests.engines import assert_same_run, reference_data

REPO = Path(__file__).resolve().parents[1]
# Beam's gRPC servers bind every interface: the services run in a private
# network namespace, where the only interface is loopback.
PRIVATE_NETWORK = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
RUN_TIMEOUT_S = 900


def private_network_available() -> bool:
    if not (shutil.which("unshare") and shutil.which("ip")):
        return False
    return subprocess.run([*PRIVATE_NETWORK, "true"], capture_output=True).returncode == 0


@pytest.fixture
def portable_score():
    """portable_score(*score args) -> exit code of a run through tests/portable_job.py; whatever
    it started (services, SDK workers) is killed at teardown, even if the run hung or failed."""
    if not private_network_available():
        if os.environ.get("CI"):
            pytest.fail("CI must run the portable-path test: it needs unshare and ip (a private network namespace)")
        pytest.skip("needs a private network namespace (unshare --net, as root)")
    started = []

    def run(*score_args):
        process = subprocess.Popen([*PRIVATE_NETWORK, sys.executable, "-m", "tests.portable_job", *score_args],
                                   cwd=REPO, start_new_session=True)
        started.append(process)
        return process.wait(timeout=RUN_TIMEOUT_S)

    yield run
    for process in started:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the group has ended
        process.wait()


@pytest.mark.engine
def test_a_run_through_the_job_service_and_worker_pool_equals_fnapi(tmp_path, portable_score):
    shards = reference_data(tmp_path / "ref")
    assert main(["score", "--input", str(shards), "--output", str(tmp_path / "fnapi"), *RUNNER]) == 0
    assert portable_score("--input", str(shards), "--output", str(tmp_path / "portable")) == 0
    assert_same_run(tmp_path / "portable", tmp_path / "fnapi")


@pytest.mark.engine
def test_the_template_job_publishes_itself_after_its_launcher_has_ended(tmp_path, portable_score):
    # The Flex Template's launcher submits and exits (Dataflow does not let it wait): the job's
    # own last step writes the report, the manifest listing it and _SUCCESS, and releases the lock.
    shards = reference_data(tmp_path / "ref")
    assert main(["score", "--input", str(shards), "--output", str(tmp_path / "fnapi"), *RUNNER]) == 0
    out = tmp_path / "template"
    assert portable_score("--template", "--input", str(shards), "--output", str(out)) == 0
    assert_same_run(out, tmp_path / "fnapi")
    assert (out / "report.html").exists() and not (out / ".lock").exists()
    listed = {entry["path"] for entry in load_json(out / "manifest.json")["outputs"]}
    assert {"report.html", "metrics.json"} <= listed
