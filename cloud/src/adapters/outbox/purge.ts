import type { Queryable } from '../db/db.js';

/**
 * Purge: deletes `sent` rows older than the retention, keeping each
 * gateway's newest row (so `seq` never restarts: the counter is in
 * gateway_seq anyway). A resync reaching back past the purged rows is
 * answered with a snapshot. Also drops old uplink dedupe rows: a duplicate
 * older than the retention is no longer expected from a QoS 1 redelivery,
 * and old rejected-uplink records.
 */
export async function purgeOld(q: Queryable, olderThan: number): Promise<{ outbox: number; inbox: number; rejected: number }> {
  const o = await q.query(
    `DELETE FROM outbox o WHERE o.status = 'sent' AND o.sent_at < $1
       AND o.seq < (SELECT last_seq FROM gateway_seq s WHERE s.gateway_id = o.gateway_id)`,
    [olderThan],
  );
  // raise each gateway's gap floor to the highest seq about to be purged, so listUplinkGaps does not
  // report purged seqs as missing (no transaction needed: rows arriving meanwhile are newer than the cut)
  await q.query(
    `UPDATE uplink_seq s SET floor = GREATEST(s.floor, m.mx)
       FROM (SELECT gateway_id, max(seq) AS mx FROM uplink_inbox WHERE received_at < $1 AND seq IS NOT NULL GROUP BY gateway_id) m
      WHERE s.gateway_id = m.gateway_id`,
    [olderThan],
  );
  const i = await q.query('DELETE FROM uplink_inbox WHERE received_at < $1', [olderThan]);
  // anyone can publish on a broker topic: the record of rejected uplinks is bounded by age too
  const r = await q.query('DELETE FROM rejected_uplinks WHERE at < $1', [olderThan]);
  // records of resync snapshots sent: an ack older than the retention is not expected any more
  await q.query('DELETE FROM resync_snapshots WHERE sent_at < $1', [olderThan]);
  return { outbox: o.rowCount, inbox: i.rowCount, rejected: r.rowCount };
}
