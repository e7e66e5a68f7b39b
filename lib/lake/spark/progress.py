"""Task progress of a running Spark job group, polled from the status tracker in a thread (the
driver's collect blocks the main thread), for progress bars and logs."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

ProgressCallback = Callable[[int, int], None]  # (tasks done, tasks total)


@contextmanager
def spark_job_group(spark_context, group_id: str, description: str, progress: ProgressCallback | None = None
              ) -> Iterator[None]:
    """The jobs started inside belong to `group_id`, shown with `description` in Spark's UI, and
    their task progress goes to `progress`; the thread's job group is cleared afterwards."""
    spark_context.setJobGroup(group_id, description[:1000])
    try:
        with track_job_group(spark_context, group_id, progress):
            yield
    finally:
        spark_context.setLocalProperty("spark.jobGroup.id", None)
        spark_context.setLocalProperty("spark.job.description", None)


@contextmanager
def track_job_group(spark_context, job_group: str, callback: ProgressCallback | None,
                    interval_s: float = 0.25) -> Iterator[None]:
    if callback is None:
        yield
        return
    stop = threading.Event()
    tracker = spark_context.statusTracker()

    def report() -> None:
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

    def poll() -> None:
        while not stop.wait(interval_s):
            report()

    thread = threading.Thread(target=poll, name=f"progress-{job_group}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    report()  # where the jobs ended, however quickly they ran


@contextmanager
def report_progress(label: str, *, stream=None, every_s: float = 10.0) -> Iterator[ProgressCallback]:
    """A ProgressCallback that shows tasks done / total: a live bar on a terminal (rich, gone
    when the job ends), else a plain line at most every `every_s` (for Airflow's task log)."""
    import sys
    import time

    stream = stream if stream is not None else sys.stderr
    if stream.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"), TimeElapsedColumn())
        with Progress(*columns, console=Console(file=stream), transient=True) as bar:
            task = bar.add_task(label, total=None)
            yield lambda done, total: bar.update(task, completed=done, total=total)
        return
    started = time.monotonic()
    last = {"at": started, "said": (0, 0)}

    def line(done: int, total: int) -> None:
        # a line when the count moved, at most every every_s; unchanged counts are said once a minute
        now = time.monotonic()
        quiet_for = now - last["at"]
        if done < total and quiet_for >= every_s and ((done, total) != last["said"] or quiet_for >= 60):
            last["at"], last["said"] = now, (done, total)
            print(f"{label}: {done}/{total} tasks done ({now - started:.0f} s)", file=stream, flush=True)

    yield line
