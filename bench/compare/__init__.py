"""`make queue-compare`: the job-queue workloads of issue #11 run through FenecDB and each peer installed here
(PostgreSQL, Redis, beanstalkd), alternated in rounds, with FenecDB's ratio to each peer in the same round.

    .venv/bin/python -m bench.compare [--quick] [--jobs N] [--rounds R] [--systems fenecdb,postgres,...]

Modules: `harness` (rounds, phases, the run), `loadgen` (the workloads, the same for every system),
`fenec`, `postgres`, `redisq`, `beanstalk` (one per system: start, stop, load, claim, ack, wait),
`beanstalk_proto` (our few lines of beanstalkd's text protocol), `stats` and `report` (the table),
`progress` (the bar on stderr), `procs` (starting and stopping a peer's process), `machine` (what a run names
of the machine it ran on, for `make queue-bench` too).
"""
