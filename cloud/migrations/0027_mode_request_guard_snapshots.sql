-- 0027: I4 for mode requests (issue #17 loose ends; docs/state-machines.md "Mode request").
-- Forward-only. The code's table is cloud/src/domain/mode-requests.ts (MODE_REQUEST_TRANSITIONS).
--
-- A row is inserted `pending` by requestMode; it leaves `pending` once, to `applied` or
-- `refused`, and only inside settleModeRequest (a gateway's ack of its site.mode, or of a
-- resync snapshot that covered its seq). `applied` and `refused` are final. Each verb sets
-- tobira.verb in its transaction (enterVerb); a status written anywhere else is refused.
CREATE FUNCTION mode_request_status_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_verb text := coalesce(current_setting('tobira.verb', true), '');
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF v_verb <> 'requestMode' THEN
      RAISE EXCEPTION 'mode_requests rows are written only by requestMode (tobira.verb = %)', v_verb USING ERRCODE = 'P0001';
    END IF;
    IF NEW.status <> 'pending' THEN
      RAISE EXCEPTION 'a mode request starts pending, not %', NEW.status USING ERRCODE = 'P0001';
    END IF;
    RETURN NEW;
  END IF;
  IF OLD.status <> 'pending' THEN
    RAISE EXCEPTION 'mode request %/% is %: final', OLD.request_id, OLD.gateway_id, OLD.status USING ERRCODE = 'P0001';
  END IF;
  IF NEW.status NOT IN ('applied', 'refused') THEN
    RAISE EXCEPTION 'mode request % -> %: not a transition', OLD.status, NEW.status USING ERRCODE = 'P0001';
  END IF;
  IF v_verb <> 'settleModeRequest' THEN
    RAISE EXCEPTION 'mode_requests.status is written only by settleModeRequest (tobira.verb = %)', v_verb USING ERRCODE = 'P0001';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER mode_requests_status_insert BEFORE INSERT ON mode_requests FOR EACH ROW EXECUTE FUNCTION mode_request_status_guard();
CREATE TRIGGER mode_requests_status_update BEFORE UPDATE ON mode_requests FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION mode_request_status_guard();

-- Resync snapshots sent (issue #17 loose ends; docs/architecture.md "Resync"): one row per
-- snapshot, named by its first part's jti (what the gateway's acks of it name). When the
-- gateway acks the whole snapshot (SNAPSHOT_APPLIED, or the refusal code of its trusted-key
-- set), the mode requests of that gateway whose seq the snapshot covers are settled
-- (MODE_SNAPSHOT_COVERED; the snapshot carried the site's modes), and when its trusted-key set
-- was applied, so are the signing-key deliveries it covers. Rows older than the outbox
-- retention are purged with it.
CREATE TABLE resync_snapshots (
  jti         text    PRIMARY KEY,
  gateway_id  text    NOT NULL REFERENCES gateways(id),
  snapshot_id text    NOT NULL UNIQUE,
  as_of_seq   bigint  NOT NULL,
  keyset      boolean NOT NULL,
  sent_at     bigint  NOT NULL,
  acked_at    bigint,
  ack_code    text
);
CREATE INDEX resync_snapshots_sent ON resync_snapshots (sent_at);

-- An explicit staff marker on keys (issue #17 loose ends; docs/gateway.md "Privacy"): a staff key
-- is kept out of a room whose guest has privacy on. Set by `staff: true` on issue, and for every
-- offline-capable key (a master key is a staff key); the adapter reads `staff OR offline_capable`,
-- so keys issued before this migration read as they did (no backfill through the status guard).
ALTER TABLE keys ADD COLUMN staff boolean NOT NULL DEFAULT false;
