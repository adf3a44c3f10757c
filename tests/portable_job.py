"""`python -m tests.portable_job [--template] SCORE_ARGS...`: one `litmus-score score` run on the portable path.

Starts Beam's local job service and an external SDK worker pool on free
loopback ports, runs the scoring job through them (PortableRunner,
EXTERNAL environment), stops both and exits with the job's exit code.
With --template the job is launched as the Dataflow Flex Template launches
it (deploy/dataflow/main.py, the runner and its options the image's LITMUS_BEAM_OPTIONS:
submitted, not waited for); the services are
kept until the job has published the run (OUTPUT/_SUCCESS) and the exit
code is the launcher's, which has ended by then: 3 if it had not.
tests/test_portable.py runs it inside a private network namespace, because
Beam's gRPC servers bind every interface.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READY_TIMEOUT_S = 60
JOB_TIMEOUT_S = 600


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_listening(port: int, process: subprocess.Popen, name: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{name} did not listen on port {port} within {READY_TIMEOUT_S} s")


def wait_for_port_file(path: Path, process: subprocess.Popen) -> int:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"the job service exited with {process.returncode} before listening")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the job service wrote no port file within {READY_TIMEOUT_S} s")
        time.sleep(0.2)
    return int(path.read_text())


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for_publication(output: Path, launcher_ended_first: bool) -> int:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not (output / "_SUCCESS").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the job did not publish {output} within {JOB_TIMEOUT_S} s")
        time.sleep(0.5)
    return 0 if launcher_ended_first else 3


def main(score_args: list) -> int:
    template = score_args[:1] == ["--template"]
    score_args = score_args[1:] if template else score_args
    python = sys.executable
    # The pool starts SDK workers as `python -c ...`: the venv's python must come first.
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")]))
    services = []
    try:
        with tempfile.TemporaryDirectory(prefix="litmus-job-service-") as work:
            port_file = Path(work) / "job.port"
            job_service = subprocess.Popen(
                [python, "-m", "apache_beam.runners.portability.local_job_service_main", "--port", "0",
                 "--port_file", str(port_file), "--staging_dir", str(Path(work) / "staging")], env=env)
            services.append(job_service)
            worker_port = free_port()
            pool = subprocess.Popen(
                [python, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={worker_port}"],
                env=env)
            services.append(pool)
            job_port = wait_for_port_file(port_file, job_service)
            wait_until_listening(job_port, job_service, "the job service")
            wait_until_listening(worker_port, pool, "the worker pool")
            portable = {"runner": "PortableRunner", "job_endpoint": f"localhost:{job_port}",
                        "environment_type": "EXTERNAL", "environment_config": f"localhost:{worker_port}"}
            if template:  # the runner and its options are the image's (LITMUS_BEAM_OPTIONS), never a parameter
                launcher = [python, str(Path(__file__).resolve().parents[1] / "deploy" / "dataflow" / "main.py")]
                run = subprocess.run([*launcher, *score_args], env={**env, "LITMUS_BEAM_OPTIONS": json.dumps(portable)},
                                     timeout=JOB_TIMEOUT_S)
            else:
                run = subprocess.run([python, "-m", "pipeline", "score", *score_args,
                                      *[f"--{name}={value}" for name, value in portable.items()]],
                                     env=env, timeout=JOB_TIMEOUT_S)
            if not template or run.returncode:
                return run.returncode
            output = Path(score_args[score_args.index("--output") + 1])
            return wait_for_publication(output, launcher_ended_first=not (output / "_SUCCESS").exists())
    finally:
        for process in reversed(services):
            stop(process)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
