import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/app/keys.js';
import { DAY, T0, deps, openTestDb, seed, type TestDb } from './helpers.js';

/** A verb run inside a caller's transaction (VerbOptions `{ db }`): its own transaction becomes a savepoint. */
describe.each(pgBackends())('nested units of work on %s', (backend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(backend);
    await t.db.exec('CREATE TABLE nest_probe (id text PRIMARY KEY)');
  });
  afterAll(async () => {
    await t?.close();
  });
  const ids = async () => (await t.db.query<{ id: string }>('SELECT id FROM nest_probe ORDER BY id')).rows.map((r) => r.id);

  it('a failed inner unit rolls back to its savepoint; the outer unit goes on and commits its own rows', async () => {
    await t.db.transaction(async (tx) => {
      await tx.query(`INSERT INTO nest_probe VALUES ('a-outer')`);
      await expect(
        tx.transaction(async (inner) => {
          await inner.query(`INSERT INTO nest_probe VALUES ('a-inner')`);
          await inner.query(`INSERT INTO nest_probe VALUES ('a-outer')`); // unique violation
        }),
      ).rejects.toMatchObject({ code: '23505' });
      await tx.transaction((inner) => inner.query(`INSERT INTO nest_probe VALUES ('a-kept')`));
    });
    expect(await ids()).toEqual(['a-kept', 'a-outer']);
  });

  it('a released inner unit is still rolled back with its outer unit', async () => {
    await expect(
      t.db.transaction(async (tx) => {
        await tx.transaction((inner) => inner.query(`INSERT INTO nest_probe VALUES ('b-inner')`));
        throw new Error('outer fails after the inner unit released');
      }),
    ).rejects.toThrow('outer fails');
    expect(await ids()).not.toContain('b-inner');
  });

  it('a key issued inside a caller transaction that then rolls back leaves no key, history or outbox row', async () => {
    const d = deps(t.db);
    const s = await seed(d);
    const keyId = `key-nested-${s.u}`;
    const before = await t.db.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox');
    await expect(
      t.db.transaction(async (tx) => {
        const o = await issueKey(
          { ...d, db: tx },
          {
            keyId,
            personId: s.personId,
            doors: [s.doorA],
            credential: { type: 'card', value: '04A1B2C3' },
            validFrom: T0,
            validUntil: T0 + DAY,
          },
        );
        expect(o).toMatchObject({ status: 'applied' });
        throw new Error('the caller fails after the verb');
      }),
    ).rejects.toThrow('the caller fails');
    expect((await t.db.query('SELECT 1 FROM keys WHERE id = $1', [keyId])).rowCount).toBe(0);
    expect((await t.db.query('SELECT 1 FROM key_history WHERE key_id = $1', [keyId])).rowCount).toBe(0);
    expect((await t.db.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox')).rows[0]?.n).toBe(before.rows[0]?.n);
  });
});
