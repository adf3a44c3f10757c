"""The runner of a local run's worker threads: FnApiRunner, its workers' outputs flushed by size only.

With `--direct_running_mode=multi_threading`, FnApiRunner runs its workers as
threads of an embedded gRPC environment whose output streams Beam also
flushes once a second from a timer thread, with no lock against the thread
that is writing an element (apache_beam.runners.worker.data_plane,
TimeBasedBufferingClosableOutputStream). An element whose coder runs Python,
as every Arrow element here does (transforms.coders), lets that timer in
between the element's header and its value, and the element leaves in two
messages. The runner takes every message to hold whole elements: it deals a
PCollection's messages out to the next stage's workers, and a GroupByKey
decodes each message alone; so the next stage reads a batch from half its
bytes ("Error decoding input stream ... RecordBatchCoder", or a key decoded
from a batch's text). Flushed by size only, a stream is cut where Beam
checks its size: after a whole element.
"""

from __future__ import annotations

import json

from apache_beam.portability import python_urns
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

# A flush interval no batch run outlasts (24.8 days): Beam reads 0 as its default of one second.
NO_TIMED_FLUSH_MS = 2**31 - 1


class ThreadedRunner(FnApiRunner):
    """FnApiRunner whose embedded gRPC workers (multi_threading) flush their outputs by size only."""

    def run_via_runner_api(self, pipeline_proto, options):
        for environment in pipeline_proto.components.environments.values():
            if environment.urn == python_urns.EMBEDDED_PYTHON_GRPC:
                config = json.loads(environment.payload or b"{}")
                config["data_buffer_time_limit_ms"] = NO_TIMED_FLUSH_MS
                environment.payload = json.dumps(config).encode("utf-8")
        return super().run_via_runner_api(pipeline_proto, options)
