-- 0021: what gateway staff did (the gateways' `staff.action` uplinks) and who opened a door remotely
-- (docs/api.md "Staff actions", docs/protocol.md). Forward-only.

-- One row per staff action, deduplicated by the gateway's action id in the uplink's transaction.
CREATE TABLE staff_actions (
  action_id   uuid PRIMARY KEY,
  gateway_id  text   NOT NULL REFERENCES gateways(id),
  seq         bigint NOT NULL,
  at          bigint NOT NULL,
  actor_id    text,
  actor_name  text   NOT NULL,
  action      text   NOT NULL,
  target      text,
  detail      text,
  result      text   NOT NULL CHECK (result IN ('applied', 'noop', 'refused')),
  code        text,
  cid         text   NOT NULL,
  received_at bigint NOT NULL
);
CREATE INDEX staff_actions_gateway_at ON staff_actions (gateway_id, at);

-- A remote unlock's access event names the supervisor and the reason (the wire's StaffBy); NULL otherwise.
ALTER TABLE audit ADD COLUMN staff_by jsonb;
