import { pgBackends } from '@tobira/shared/testing';
import { describe, expect, it } from 'vitest';
import { insertBlock, loadBlock, lockPersonForBlock } from '../src/adapters/db/walk-ins.js';
import { issueKey } from '../src/app/keys.js';
import { blockPerson } from '../src/app/walk-ins.js';
import { T0, deps, openTestDb, seed } from './helpers.js';

/**
 * A block racing a key being issued for the same person (a payment confirming, a walk-in paid, a
 * membership activated), on PostgreSQL where the two run at once under READ COMMITTED: each takes the
 * person's row (the gate a share lock, the block an update lock), so neither can miss the other's write
 * still uncommitted: the gate waits for the block and sees it; the block waits for the key and revokes it.
 * (PGlite is one connection: its transactions never overlap, so the same holds there by construction.)
 */
const DAY = 86_400_000;
const settledWithin = async (p: Promise<unknown>, ms: number) =>
  Promise.race([p.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

describe.each(pgBackends())('a block racing a key for the same person on %s', (backend) => {
  it('the gate waits for a block still being written, and then sees it', async () => {
    let commit = () => {};
    const t = await openTestDb(backend);
    try {
      const d = deps(t.db);
      const s = await seed(d);
      const held = new Promise<void>((r) => (commit = r));
      let locked!: () => void;
      const lockTaken = new Promise<void>((r) => (locked = r));
      const blocking = t.db.transaction(async (tx) => {
        await lockPersonForBlock(tx, s.personId);
        await insertBlock(tx, { siteId: s.siteId, personId: s.personId, reason: 'banned', blockedBy: 'staff-1', blockedAt: T0 });
        locked();
        await held;
      });
      await lockTaken;
      const gate = t.db.transaction((tx) => loadBlock(tx, s.siteId, s.personId));
      expect(await settledWithin(gate, 400)).toBe(false);
      commit();
      await blocking;
      expect(await gate).toMatchObject({ personId: s.personId, reason: 'banned' });
    } finally {
      commit();
      await t.close();
    }
  });

  it('a block waits for a key being issued behind the gate, then revokes it', async () => {
    let commit = () => {};
    const t = await openTestDb(backend);
    try {
      const d = deps(t.db);
      const s = await seed(d);
      const held = new Promise<void>((r) => (commit = r));
      let gated!: () => void;
      const gatePassed = new Promise<void>((r) => (gated = r));
      const issuing = t.db.transaction(async (tx) => {
        expect(await loadBlock(tx, s.siteId, s.personId)).toBeNull();
        gated();
        await held;
        const k = await issueKey(
          { ...d, db: tx },
          { personId: s.personId, doors: [s.doorA], credential: { type: 'pin', value: '246813' }, validFrom: T0, validUntil: T0 + DAY },
        );
        expect(k.status).toBe('applied');
      });
      await gatePassed;
      // blocking calls no Stripe
      const block = blockPerson({ ...d, stripe: null }, { siteId: s.siteId, personId: s.personId, reason: 'banned', actor: 'staff-1' });
      expect(await settledWithin(block, 400)).toBe(false);
      commit();
      await issuing;
      expect(await block).toMatchObject({ status: 'applied', code: 'PERSON_BLOCKED', state: { keysRevoked: 1 } });
      const live = await t.db.query("SELECT id FROM keys WHERE person_id = $1 AND status IN ('issuing', 'active')", [s.personId]);
      expect(live.rows).toEqual([]);
    } finally {
      commit();
      await t.close();
    }
  });
});
