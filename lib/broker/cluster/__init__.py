"""Many brokers on one shared storage root: membership, controller election and partition
leadership behind one small interface (`coordination.Coordination`), served by ZooKeeper
(`zookeeper.ZooKeeperCoordination`, kazoo) or, for one broker alone, by `single.SingleBrokerCoordination`.
docs/CLUSTER.md describes the design; the storage side of fencing is
`topiclake.segments.leader_epochs`.
"""
