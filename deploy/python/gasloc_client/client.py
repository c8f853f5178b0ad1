"""A Python client of the gasloc coordinator (gasloc.v1.Coordinator).

What gaslocctl does, from Python: start a job, watch it (a generator of
events), stop it, list jobs and workers.

    from gasloc_client import Client

    with Client("coordinator.example:7070") as client:
        job = client.start_job({"name": "tiny", "data": {"corpus_path": "/data"},
                                "stop": {"max_rounds": 20}, "min_workers": 2})
        for event in client.watch(job.job_id):
            print(event.description or event.job.rounds_completed)
        print(client.get_job(job.job_id).val_bpb)

Messages are the generated protobuf classes of proto/gasloc/v1/*.proto
(JobSpec, JobStatus, JobEvent, WorkerStatus); their fields are documented
there. Errors are grpc.RpcError with the coordinator's status code and
message (docs/coordinator.md, "Status codes").

Thread safety: a Client may be shared by threads (gRPC channels are
thread-safe); each watch() generator belongs to the thread iterating it.
"""

import os
import sys

import grpc
from google.protobuf import json_format, text_format

from gasloc_client._stubs import coordinator_pb2, coordinator_pb2_grpc, job_pb2

JobSpec = job_pb2.JobSpec
JobStatus = coordinator_pb2.JobStatus
JobEvent = coordinator_pb2.JobEvent
WorkerStatus = coordinator_pb2.WorkerStatus

# JobState values after which a job never changes again.
ENDED_STATES = frozenset({
    coordinator_pb2.JOB_STATE_FINISHED,
    coordinator_pb2.JOB_STATE_FAILED,
    coordinator_pb2.JOB_STATE_STOPPED,
})


def state_name(state):
    """'FINISHED' for JOB_STATE_FINISHED, and so on."""
    return coordinator_pb2.JobState.Name(state).replace("JOB_STATE_", "")


def event_kind_name(kind):
    """'MEMBERSHIP' for JOB_EVENT_KIND_MEMBERSHIP, and so on."""
    return coordinator_pb2.JobEventKind.Name(kind).replace("JOB_EVENT_KIND_", "")


def to_job_spec(spec):
    """A JobSpec from a JobSpec, a dict (JSON field names, proto or
    lowerCamel), JSON text, text-format text, or the path of a .json or
    text-format file: what gaslocctl job start accepts."""
    if isinstance(spec, JobSpec):
        return spec
    if isinstance(spec, dict):
        return json_format.ParseDict(spec, JobSpec())
    if isinstance(spec, (str, os.PathLike)):
        text = str(spec)
        if "\n" not in text and "{" not in text and os.path.isfile(text):
            with open(text, encoding="utf-8") as f:
                text = f.read()
        if text.lstrip().startswith("{"):
            return json_format.Parse(text, JobSpec())
        return text_format.Parse(text, JobSpec())
    raise TypeError(f"cannot make a JobSpec from {type(spec).__name__}")


class Client:
    """One channel to one coordinator.

    address: "host:port" of gasloc-coordinator.
    timeout: deadline of each unary call in seconds (watch() has none).
    root_certificates, private_key, certificate_chain: PEM bytes for TLS (as
    gaslocctl's --tls_ca, --tls_key, --tls_cert); none = plaintext.
    token: the operator's bearer token (as gaslocctl's --token_file), sent
    as "authorization: Bearer <token>" on every call; docs/security.md.
    """

    def __init__(self, address="localhost:7070", *, timeout=10.0,
                 root_certificates=None, private_key=None,
                 certificate_chain=None, token=None):
        self.address = address
        self.timeout = timeout
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        if root_certificates is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=root_certificates, private_key=private_key,
                certificate_chain=certificate_chain)
            self._channel = grpc.secure_channel(address, credentials)
        else:
            self._channel = grpc.insecure_channel(address)
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---------------------------------------------------------------- jobs

    def start_job(self, spec):
        """Validates and stores a job; returns its JobStatus (PENDING until
        min_workers idle workers exist). `spec`: see to_job_spec()."""
        request = coordinator_pb2.StartJobRequest(spec=to_job_spec(spec))
        return self._stub.StartJob(request, timeout=self.timeout,
                                   metadata=self._metadata).job

    def get_job(self, job_id):
        request = coordinator_pb2.GetJobRequest(job_id=job_id)
        return self._stub.GetJob(request, timeout=self.timeout,
                                 metadata=self._metadata).job

    def list_jobs(self):
        """Every job the coordinator knows, as JobStatus messages."""
        request = coordinator_pb2.ListJobsRequest()
        return list(self._stub.ListJobs(request, timeout=self.timeout,
                                        metadata=self._metadata).jobs)

    def stop_job(self, job_id, reason="stopped from the Python client"):
        """PENDING or RUNNING -> STOPPED; FAILED_PRECONDITION if it ended."""
        request = coordinator_pb2.StopJobRequest(job_id=job_id, reason=reason)
        return self._stub.StopJob(request, timeout=self.timeout,
                                  metadata=self._metadata).job

    def watch(self, job_id):
        """Yields the job's JobEvents: a SNAPSHOT first, then STATE, ROUND,
        MEMBERSHIP, BUDGET and PROGRESS events as they happen. Ends after
        the event that ends the job. Closing the generator (break, del, or
        leaving a `with closing(...)`) cancels the stream."""
        call = self._stub.WatchJob(coordinator_pb2.WatchJobRequest(job_id=job_id),
                                   metadata=self._metadata)
        try:
            for event in call:
                yield event
        finally:
            call.cancel()

    def wait(self, job_id, on_event=None):
        """Watches the job until it ends and returns its final JobStatus;
        on_event(event) is called for every event on the way."""
        last = None
        for event in self.watch(job_id):
            if on_event is not None:
                on_event(event)
            last = event.job
        if last is None or last.state not in ENDED_STATES:
            return self.get_job(job_id)
        return last

    # ------------------------------------------------------------- workers

    def list_workers(self, include_gone=False, job_id=None):
        """WorkerStatus of every live worker (include_gone: also dead and
        departed ones); job_id: only the members of that job's current
        epoch (JobStatus.worker_ids), also after the job ended."""
        request = coordinator_pb2.ListWorkersRequest(include_gone=include_gone)
        workers = list(self._stub.ListWorkers(request, timeout=self.timeout,
                                              metadata=self._metadata).workers)
        if job_id is not None:
            members = set(self.get_job(job_id).worker_ids)
            workers = [w for w in workers if w.worker_id in members]
        return workers


def _format_status(job):
    return (f"job {job.job_id} {state_name(job.state)} round "
            f"{job.rounds_completed}/{job.spec.stop.max_rounds} loss "
            f"{job.train_loss:.4f} val_bpb {job.val_bpb:.4f} workers "
            f"{len(job.worker_ids)}")


def print_event(event, out=sys.stdout):
    """One line per event, like `gaslocctl job watch` piped."""
    kind = event_kind_name(event.kind)
    what = f" {event.description}" if event.description else ""
    print(f"{kind:10s} {_format_status(event.job)}{what}", file=out, flush=True)
