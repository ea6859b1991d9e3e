"""Replication (server.md §7): a primary streams its records to replicas that follow it.

* `identity.py`: a file's history id and role, kept beside the data file.
* `feed.py`: the primary's side: the records kept for replicas, and the stream's bytes.
* `follower.py`: the replica's side: a thread that reads the stream and applies it.
* `cluster.py`: `--etcd`: the primary elected through etcd's leases, fenced by its own, and terms;
  `etcd.py` is its client of etcd's JSON gateway.

The HTTP routes (`/_replication`, its status and promote) are `http/replication.py`.
"""
