"""What cluster coordination costs, on loopback, each figure beside its baseline from the same run:

* compare-and-set of a partition state (ZooKeeper 1 node and 3 nodes): p50/p99 of a version-
  guarded write with a controller-epoch check, against an unguarded write of the same znode;
* the storage fence a leader checks before each acknowledgement (PartitionFence.check, one stat),
  against the fsync it follows (a 1 KiB append + fsync in the same directory);
* failover of the controller: kill -9 of the controller process to another broker's election,
  against a clean close to election (the difference is waiting out the ZooKeeper session);
* a ZooKeeper leader kill in 3 nodes: the longest pause of a stream of guarded writes.

Prints a table and, last, one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from topiclake.broker.cluster.config import ClusterConfig
from topiclake.broker.cluster.coordination import BrokerInfo, CoordinationError, PartitionState
from topiclake.broker.cluster.ensemble import Ensemble
from topiclake.broker.cluster.zookeeper import ZooKeeperCoordination
from topiclake.segments.leader_fence import PartitionFence

SESSION_MS = 2000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def connect(ensemble: Ensemble, broker_id: int, chroot: str) -> ZooKeeperCoordination:
    client = ZooKeeperCoordination(ClusterConfig(zookeeper=ensemble.connect_string, chroot=chroot,
                                                 session_timeout_ms=SESSION_MS), broker_id)
    client.start()
    return client


def bench_cas(ensemble: Ensemble, count: int) -> dict:
    client = connect(ensemble, 1, f"/bench-cas-{time.monotonic_ns()}")
    try:
        tokens = []
        client.campaign(tokens.append, lambda: None)
        while not tokens:
            time.sleep(0.01)
        client.create_topic("t", {0: PartitionState(1, 0, (1,))}, token=tokens[0])
        version, guarded, plain = 0, [], []
        path = client._state_path("t", 0)
        for epoch in range(1, count + 1):
            started = time.perf_counter()
            version = client.set_partition_state("t", 0, PartitionState(1, epoch, (1,)), version,
                                                 token=tokens[0]).version
            guarded.append(time.perf_counter() - started)
            started = time.perf_counter()
            client._client.set(path, PartitionState(1, epoch, (1,)).to_json())  # no version, no token
            plain.append(time.perf_counter() - started)
            version += 1
        return {"cas_p50_ms": percentile(guarded, 0.5) * 1e3, "cas_p99_ms": percentile(guarded, 0.99) * 1e3,
                "plain_p50_ms": percentile(plain, 0.5) * 1e3, "plain_p99_ms": percentile(plain, 0.99) * 1e3}
    finally:
        client.close()


def bench_fence(count: int) -> dict:
    with tempfile.TemporaryDirectory(dir=".") as name:
        fence = PartitionFence(name)
        fence.begin_takeover(1)
        fd = os.open(os.path.join(name, "00000000000000000000.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        data = b"x" * 1024
        fsyncs, checks = [], []
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, data)
            os.fsync(fd)
            fsyncs.append(time.perf_counter() - started)
            started = time.perf_counter()
            fence.check(1)
            checks.append(time.perf_counter() - started)
        os.close(fd)
    return {"fence_check_p50_us": percentile(checks, 0.5) * 1e6, "fence_check_p99_us": percentile(checks, 0.99) * 1e6,
            "append_fsync_p50_us": percentile(fsyncs, 0.5) * 1e6}


def member_main(connect_string: str, chroot: str, broker_id: int) -> None:
    """A controller candidate in its own process: prints "elected <monotonic time>" when it wins."""
    client = ZooKeeperCoordination(ClusterConfig(zookeeper=connect_string, chroot=chroot,
                                                 session_timeout_ms=SESSION_MS), broker_id)
    client.start()
    client.register_broker(BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id))
    client.campaign(lambda token: print(f"elected {time.monotonic()}", flush=True), lambda: None)
    for line in sys.stdin:  # "close": leave cleanly
        if line.strip() == "close":
            client.close()
            return
    threading.Event().wait()


def spawn_member(ensemble: Ensemble, chroot: str, broker_id: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--member", ensemble.connect_string, chroot, str(broker_id)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def one_failover(ensemble: Ensemble, how: str) -> float:
    chroot = f"/bench-failover-{time.monotonic_ns()}"
    first = spawn_member(ensemble, chroot, 1)
    assert first.stdout.readline().startswith("elected")
    second = spawn_member(ensemble, chroot, 2)
    time.sleep(0.5)  # registered and watching
    started = time.monotonic()
    if how == "kill":
        os.kill(first.pid, signal.SIGKILL)
    else:
        first.stdin.write("close\n")
        first.stdin.flush()
    line = second.stdout.readline()
    elected_at = float(line.split()[1])
    for process in (first, second):
        if process.poll() is None:
            process.kill()
        process.wait()
    return elected_at - started


def bench_failover(ensemble: Ensemble, rounds: int) -> dict:
    killed = [one_failover(ensemble, "kill") for _ in range(rounds)]
    closed = [one_failover(ensemble, "close") for _ in range(rounds)]
    return {"election_after_kill_median_s": statistics.median(killed), "election_after_kill_max_s": max(killed),
            "election_after_close_median_s": statistics.median(closed)}


def bench_zookeeper_leader_kill(ensemble: Ensemble) -> dict:
    client = connect(ensemble, 1, f"/bench-zkkill-{time.monotonic_ns()}")
    try:
        client.create_topic("t", {0: PartitionState(1, 0, (1,))})
        version, epoch, last_ok, longest = 0, 0, time.monotonic(), 0.0
        victim = ensemble.leader_id()
        killed_at = None
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            if killed_at is None and time.monotonic() - last_ok > 0 and epoch == 50:
                ensemble.kill(victim)
                killed_at = time.monotonic()
            try:
                epoch += 1
                version = client.set_partition_state("t", 0, PartitionState(1, epoch, (1,)), version).version
                now = time.monotonic()
                longest, last_ok = max(longest, now - last_ok), now
            except CoordinationError:
                epoch -= 1
                current = client.partition_state("t", 0) if client.session_state.value == "connected" else None
                if current is not None:
                    version, epoch = current.version, current.value.leader_epoch
                time.sleep(0.01)
        ensemble.restart(victim)
        return {"zk_leader_kill_longest_write_pause_s": longest}
    finally:
        client.close()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--member":
        member_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--failovers", type=int, default=3)
    args = parser.parse_args()
    figures: dict = {}
    with tempfile.TemporaryDirectory() as base:
        with Ensemble(Path(base) / "one", 1) as one:
            figures["zk1"] = bench_cas(one, args.writes)
            figures["zk1"].update(bench_failover(one, args.failovers))
        with Ensemble(Path(base) / "three", 3) as three:
            figures["zk3"] = bench_cas(three, args.writes)
            figures["zk3"].update(bench_failover(three, args.failovers))
            figures["zk3"].update(bench_zookeeper_leader_kill(three))
    figures["storage"] = bench_fence(args.writes)
    for ensemble in ("zk1", "zk3"):
        f = figures[ensemble]
        print(f"{ensemble}: CAS p50 {f['cas_p50_ms']:.2f} ms p99 {f['cas_p99_ms']:.2f} ms; unguarded set p50 "
              f"{f['plain_p50_ms']:.2f} ms (ratio {f['cas_p50_ms'] / f['plain_p50_ms']:.2f})")
        print(f"{ensemble}: controller kill -9 -> election median {f['election_after_kill_median_s']:.2f} s, max "
              f"{f['election_after_kill_max_s']:.2f} s (session {SESSION_MS} ms); clean close -> election "
              f"{f['election_after_close_median_s']:.3f} s")
    print(f"zk3: ZooKeeper leader kill -> longest pause of guarded writes "
          f"{figures['zk3']['zk_leader_kill_longest_write_pause_s']:.2f} s")
    s = figures["storage"]
    print(f"storage: fence check p50 {s['fence_check_p50_us']:.1f} us p99 {s['fence_check_p99_us']:.1f} us; "
          f"the 1 KiB append+fsync it follows p50 {s['append_fsync_p50_us']:.0f} us "
          f"(ratio {s['fence_check_p50_us'] / s['append_fsync_p50_us']:.4f})")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
