"""gasloc_client: drive gasloc training from Python (see client.py)."""

from gasloc_client.client import (ENDED_STATES, Client, JobEvent, JobSpec,
                                  JobStatus, WorkerStatus, event_kind_name,
                                  print_event, state_name, to_job_spec)

__all__ = ["Client", "JobSpec", "JobStatus", "JobEvent", "WorkerStatus",
           "ENDED_STATES", "state_name", "event_kind_name", "print_event",
           "to_job_spec"]
