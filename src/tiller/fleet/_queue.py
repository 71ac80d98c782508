"""The fleet's default run queue."""

__all__ = ["RUN_QUEUE"]

#: The queue `Fleet` submits to and `Worker` claims from unless told otherwise.
RUN_QUEUE = "tiller-runs"
