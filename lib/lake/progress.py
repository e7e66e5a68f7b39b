"""Task progress of a running Spark job group, polled from the status tracker in a thread (the
driver's collect blocks the main thread), for progress bars and logs."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

ProgressCallback = Callable[[int, int], None]  # (tasks done, tasks total)


@contextmanager
def track_job_group(spark_context, job_group: str, callback: ProgressCallback | None,
                    interval_s: float = 0.25) -> Iterator[None]:
    if callback is None:
        yield
        return
    stop = threading.Event()

    def poll() -> None:
        tracker = spark_context.statusTracker()
        while not stop.wait(interval_s):
            done = total = 0
            for job_id in tracker.getJobIdsForGroup(job_group):
                job = tracker.getJobInfo(job_id)
                for stage_id in job.stageIds if job else ():
                    stage = tracker.getStageInfo(stage_id)
                    if stage:
                        done += stage.numCompletedTasks
                        total += stage.numTasks
            if total:
                callback(done, total)

    thread = threading.Thread(target=poll, name=f"progress-{job_group}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
