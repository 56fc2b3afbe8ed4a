-- Replicas first-class (issue #14, docs/cloud.md "Dispatcher guarantees",
-- docs/scaling.md). The claim now takes a gateway's open rows (pending or
-- sending) as a prefix ordered by seq; this index serves that per-gateway
-- scan (the lowest open seq of each gateway, then its due run).
CREATE INDEX outbox_open ON outbox (gateway_id, seq) WHERE status IN ('pending', 'sending');

-- Named leases shared by the replicas of one cloud (one row per periodic
-- job, e.g. 'heartbeat'): the replica that moves `until` forward runs the
-- round, the others skip it, so a job runs once per interval across replicas.
CREATE TABLE cloud_leases (
  name text PRIMARY KEY,
  holder text NOT NULL,
  until bigint NOT NULL
);
