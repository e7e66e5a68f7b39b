"""bin/zookeeper: a ZooKeeper ensemble on loopback for an operator (docs/CLUSTER.md).

    bin/zookeeper start [--nodes 1|3|5] [--client-port P] [--tick-ms MS] DIR
                                          a new ensemble (node N serving clients on P + N - 1; free
                                          ports without --client-port); prints its connect string
    bin/zookeeper start DIR [--node N]    the recorded ensemble's stopped nodes (or node N) again,
                                          on their recorded ports and data
    bin/zookeeper stop DIR [--node N]     every node (or node N); the record stays for `start`
    bin/zookeeper restart DIR [--node N]  stop, then start, on the same ports
    bin/zookeeper status DIR              each node: serving (and its mode), running but not
                                          serving, or stopped / dead

DIR is relative to the caller's working directory. A node is alive when its process runs AND
its client port answers: `status` asks `srvr` (the mode: leader, follower, standalone) and `ruok`
(imok before a quorum formed); a recorded pid whose process is gone is shown as dead.
"""

from __future__ import annotations

import argparse
import sys

from .ensemble import STATE_FILE, Ensemble, EnsembleError, ZooKeeperNode, node_answers, node_mode


def describe(ensemble: Ensemble, node: ZooKeeperNode) -> str:
    """One node's line of `status`."""
    where = f"node {node.node_id} {ensemble.host}:{node.client_port}"
    if node.pid is None:
        return f"{where}: stopped"
    if not node.running():
        return f"{where} pid {node.pid}: dead (the process is gone)"
    mode = node_mode(ensemble.host, node.client_port)
    if mode is not None:
        return f"{where} pid {node.pid}: {mode}"
    if node_answers(ensemble.host, node.client_port):
        return f"{where} pid {node.pid}: running, not serving (no quorum yet)"
    return f"{where} pid {node.pid}: running, its port does not answer"


def _chosen(ensemble: Ensemble, node_id: int | None) -> list[int]:
    if node_id is None:
        return sorted(ensemble.nodes)
    ensemble._node(node_id)  # EnsembleError for an unknown node
    return [node_id]


def _start(args: argparse.Namespace) -> None:
    if not (args.dir / STATE_FILE).exists():
        if args.node is not None:
            raise EnsembleError(f"no ZooKeeper ensemble recorded in {args.dir}: start one without --node")
        print(Ensemble(args.dir, args.nodes, tick_ms=args.tick_ms, client_port=args.client_port).start()
              .connect_string)
        return
    ensemble = Ensemble.attach(args.dir)
    stopped = [n for n in _chosen(ensemble, args.node) if not ensemble.nodes[n].running()]
    if not stopped:
        raise EnsembleError(f"ZooKeeper node(s) {_chosen(ensemble, args.node)} of {args.dir} are running already")
    for node_id in stopped:
        ensemble.start_node(node_id)
    if sum(n.running() for n in ensemble.nodes.values()) > len(ensemble.nodes) // 2:
        ensemble.wait_serving()  # a quorum runs: the started nodes serve in a moment
    for node_id in stopped:
        print(describe(ensemble, ensemble.nodes[node_id]))
    print(ensemble.connect_string)


def _stop(args: argparse.Namespace) -> None:
    ensemble = Ensemble.attach(args.dir)
    chosen = [n for n in _chosen(ensemble, args.node) if ensemble.nodes[n].running()]
    for node_id in chosen:
        ensemble.stop_node(node_id)
    print(f"stopped {len(chosen)} ZooKeeper node(s) of {args.dir}" if chosen
          else f"no ZooKeeper node {args.node} of {args.dir} was running" if args.node is not None
          else f"no ZooKeeper node of {args.dir} was running")


def main(argv: list[str] | None = None) -> int:
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="bin/zookeeper", description="A ZooKeeper ensemble on loopback.")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start a new ensemble under DIR (prints its connect string), or "
                                              "the stopped nodes of the one recorded there, on their ports")
    start.add_argument("--nodes", type=int, default=1, choices=(1, 3, 5), help="a new ensemble's size")
    start.add_argument("--tick-ms", type=int, default=200)
    start.add_argument("--client-port", type=int, help="a new ensemble's first client port (node N: +N-1)")
    for name, text in (("stop", "stop the nodes (the record stays, for start)"),
                       ("restart", "stop and start again, on the same ports and data")):
        commands.add_parser(name, help=text)
    commands.add_parser("status", help="each node: its mode, or whether it runs or is dead")
    for sub in commands.choices.values():
        sub.add_argument("dir", type=Path)
        if sub.prog.split()[-1] != "status":
            sub.add_argument("--node", type=int, help="only this node (1-based)")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            _start(args)
        elif args.command == "stop":
            _stop(args)
        elif args.command == "restart":
            _stop(args)
            _start(args)
        else:
            ensemble = Ensemble.attach(args.dir)
            for node_id in sorted(ensemble.nodes):
                print(describe(ensemble, ensemble.nodes[node_id]))
    except EnsembleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
