import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { migrate } from '../src/adapters/db/migrate.js';
import { openDb } from '../src/adapters/db/open.js';
import { getKey, issueKey } from '../src/app/keys.js';
import { DAY, T0, deps, seed, testLog } from './helpers.js';

describe('PGlite on disk (the embedded default of the demo)', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('keeps keys and outbox rows across a restart, and does not migrate twice', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tobira-pglite-'));
    dirs.push(dir);
    const first = await openDb({ databaseUrl: undefined, pgliteDataDir: dir }, testLog);
    expect((await migrate(first, testLog, T0)).length).toBeGreaterThan(0);
    const d = deps(first);
    const s = await seed(d);
    const o = await issueKey(d, {
      personId: s.personId,
      doors: [s.doorA],
      credential: { type: 'pin', value: '424242' },
      validFrom: T0,
      validUntil: T0 + DAY,
    });
    if (o.status !== 'applied') throw new Error('issue');
    await first.close();

    const second = await openDb({ databaseUrl: undefined, pgliteDataDir: dir }, testLog);
    try {
      expect(await migrate(second, testLog, T0)).toEqual([]);
      expect(await getKey(deps(second), o.state.id)).toMatchObject({ status: 'issuing', version: 1 });
      expect((await second.query('SELECT seq, status FROM outbox WHERE gateway_id = $1', [s.gatewayId])).rows).toEqual([
        { seq: 1, status: 'pending' },
      ]);
      // the trigger survives the restart too
      await expect(second.query(`UPDATE keys SET status = 'active' WHERE id = $1`, [o.state.id])).rejects.toThrow(
        /verb guard: keys\.status issuing -> active is not a move of verb \(none: tobira\.verb unset\)/,
      );
    } finally {
      await second.close();
    }
  });
});
