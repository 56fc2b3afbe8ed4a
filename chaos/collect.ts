import Database from 'better-sqlite3';
import type { Cluster } from './cluster.js';
import type { History } from './history.js';

/**
 * After healing: what the nodes did, into the history. Each gateway's SQLite
 * (read-only: access_log, keys, tombstones, settings), the cloud's keys,
 * audit log and per-gateway view (handed-out seq, dead letters) through the
 * admin API.
 */
export async function collect(c: Cluster, h: History): Promise<void> {
  for (const g of c.gateways) {
    const db = new Database(g.sqlitePath, { readonly: true, fileMustExist: true });
    try {
      const rows = db
        .prepare('SELECT event_id, lock_id, request_id, at, allowed, code, key_id, command_id FROM access_log ORDER BY id')
        .all() as {
        event_id: string;
        lock_id: string;
        request_id: string;
        at: number;
        allowed: number;
        code: string;
        key_id: string | null;
        command_id: string | null;
      }[];
      for (const r of rows)
        h.add('collect', 'gw-access-log', {
          gatewayId: g.id,
          eventId: r.event_id,
          lockId: r.lock_id,
          requestId: r.request_id,
          nodeAt: r.at,
          allowed: r.allowed === 1,
          code: r.code,
          keyId: r.key_id,
          commandId: r.command_id,
        });
      const keys = db.prepare('SELECT key_id, version, status FROM keys').all() as { key_id: string; version: number; status: string }[];
      for (const k of keys) h.add('collect', 'gw-key', { gatewayId: g.id, keyId: k.key_id, version: k.version, status: k.status });
      const tomb = db.prepare('SELECT key_id FROM tombstones').all() as { key_id: string }[];
      const known = new Set(keys.map((k) => k.key_id));
      for (const t of tomb) if (!known.has(t.key_id)) h.add('collect', 'gw-key', { gatewayId: g.id, keyId: t.key_id, status: 'tombstone' });
      const s = db.prepare('SELECT applied_seq, lease_expires_at FROM settings WHERE id = 1').get() as
        { applied_seq: number; lease_expires_at: number | null } | undefined;
      h.add('collect', 'gw-settings', { gatewayId: g.id, appliedSeq: s?.applied_seq ?? null, leaseExpiresAt: s?.lease_expires_at ?? null });
    } finally {
      db.close();
    }
  }
  for (const g of c.gateways) {
    for await (const k of pages(c, `/keys?gatewayId=${g.id}`))
      h.add('collect', 'cloud-key', { gatewayId: g.id, keyId: k.id, status: k.status, version: k.version });
    const v = await c.api('GET', `/gateways/${g.id}`);
    const gv = (typeof v.body === 'object' && v.body !== null && 'gateway' in v.body ? v.body.gateway : v.body) as Record<string, unknown>;
    for await (const u of pages(c, `/rejected-uplinks?gatewayId=${g.id}`))
      h.add('collect', 'cloud-rejected-uplink', {
        gatewayId: g.id,
        code: u.code,
        detail: u.detail ?? u.reason ?? null,
        at: u.at ?? u.createdAt ?? null,
      });
    h.add('collect', 'cloud-gateway', { gatewayId: g.id, lastSeq: gv.lastSeq ?? null, deadLetters: gv.deadLetters ?? null });
  }
  // the cloud's own record of every revoke (key_history, and the seq its outbox row took at commit): a revoke
  // whose HTTP answer was lost is in here too
  const revokes = await c.directDb(async (db) =>
    db.query<{ key_id: string; gateway_id: string | null; at: string; seq: string | null }>(
      `SELECT h.key_id, o.gateway_id, h.at, o.seq FROM key_history h
         LEFT JOIN outbox o ON o.key_id = h.key_id AND o.type = 'key.revoke'
        WHERE h.event = 'revoke' AND h.code = 'KEY_REVOKE_QUEUED' ORDER BY h.id`,
    ),
  );
  for (const r of revokes.rows)
    h.add('collect', 'cloud-revoke', {
      keyId: r.key_id,
      gatewayId: r.gateway_id,
      nodeAt: Number(r.at),
      seq: r.seq === null ? null : Number(r.seq),
    });
  for await (const e of pages(c, `/access-events?siteId=${c.siteId}`))
    h.add('collect', 'cloud-audit', { eventId: e.eventId, gatewayId: e.gatewayId, code: e.code, allowed: e.allowed, keyId: e.keyId });
}

async function* pages(c: Cluster, path: string): AsyncGenerator<Record<string, unknown>> {
  let cursor: string | null = null;
  do {
    const res = await c.api('GET', `${path}&limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, undefined, 15_000);
    if (res.status !== 200) throw new Error(`GET ${path}: ${res.status} ${JSON.stringify(res.body)}`);
    const body = res.body as { items: Record<string, unknown>[]; nextCursor: string | null };
    yield* body.items;
    cursor = body.nextCursor;
  } while (cursor !== null);
}
