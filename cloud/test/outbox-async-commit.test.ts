import { randomUUID } from 'node:crypto';
import { ManualClock } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claim } from '../src/adapters/outbox/claim.js';
import { markSent } from '../src/adapters/outbox/mark-sent.js';
import { renewLease } from '../src/adapters/outbox/renew.js';
import { issueKey } from '../src/app/keys.js';
import { DAY, T0, deps, openTestDb, seed, type TestDb } from './helpers.js';

/**
 * The dispatcher's bookkeeping commits without waiting for its WAL flush
 * (adapters/outbox/async-commit.ts) — the claim, the lease renewal and the
 * `sent` mark — and only its own transaction does: the setting never
 * reaches the next transaction on a pooled connection, where a key's state
 * change must commit with its flush.
 */
describe.each(pgBackends())('dispatcher bookkeeping without the commit flush on %s', (pgBackend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(pgBackend);
  });
  afterAll(async () => {
    await t.close();
  });

  const syncCommit = async (q: { query: TestDb['db']['query'] }) =>
    (await q.query<{ synchronous_commit: string }>('SHOW synchronous_commit')).rows[0]?.synchronous_commit;

  it('claim, renew and mark run with synchronous_commit off in their transaction, and every later transaction has it on', async () => {
    const clock = new ManualClock(T0);
    const d = deps(t.db, clock);
    const s = await seed(d);
    const o = await issueKey(d, {
      personId: s.personId,
      doors: [s.doorA],
      credential: { type: 'pin', value: '424242' },
      validFrom: T0,
      validUntil: T0 + DAY,
    });
    expect(o.status).toBe('applied');
    const token = randomUUID();
    const seen = await t.db.transaction(async (tx) => {
      const before = await syncCommit(tx);
      const rows = await claim(tx, { token, now: clock.now(), leaseMs: 30_000, limit: 10 });
      return { before, rows, after: await syncCommit(tx) };
    });
    expect(seen.before).toBe('on');
    expect(seen.after).toBe('off');
    const row = seen.rows.find((r) => r.gatewayId === s.gatewayId);
    expect(row).toBeDefined();
    for (const step of [
      (tx: TestDb['db']) => renewLease(tx, [row!.id], token, clock.now(), 30_000),
      (tx: TestDb['db']) => markSent(tx, row!.id, token, clock.now()),
    ]) {
      const inside = await t.db.transaction(async (tx) => {
        await step(tx as never);
        return syncCommit(tx);
      });
      expect(inside).toBe('off');
    }
    const status = await t.db.query<{ status: string }>('SELECT status FROM outbox WHERE id = $1', [row!.id]);
    expect(status.rows[0]?.status).toBe('sent');
    // every connection of the pool, many times over: the setting stayed in the transactions that set it
    const later = await Promise.all(Array.from({ length: 40 }, () => t.db.transaction((tx) => syncCommit(tx))));
    expect(new Set(later)).toEqual(new Set(['on']));
    expect(await syncCommit(t.db)).toBe('on');
  });
});
