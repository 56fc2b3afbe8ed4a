import { describe, expect, it } from 'vitest';
import { isDatabaseUnavailable, whenDatabaseAnswers } from '../src/adapters/db/db.js';

const terminated = () => new Error('Connection terminated unexpectedly');
const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

describe('a cloud started while its database is away', () => {
  it('tries again until the database answers, one DATABASE_UNAVAILABLE line a try', async () => {
    const lines: object[] = [];
    const pauses: number[] = [];
    let calls = 0;
    const r = await whenDatabaseAnswers(
      () => {
        calls += 1;
        if (calls === 1) return Promise.reject(terminated());
        if (calls === 2) return Promise.reject(refused());
        return Promise.resolve('migrated');
      },
      { warn: (o) => lines.push(o) },
      60_000,
      (ms) => (pauses.push(ms), Promise.resolve()),
    );
    expect(r).toBe('migrated');
    expect(lines).toMatchObject([
      { code: 'DATABASE_UNAVAILABLE', attempt: 1 },
      { code: 'DATABASE_UNAVAILABLE', attempt: 2 },
    ]);
    expect(pauses[1]).toBeGreaterThan(pauses[0]!);
  });

  it('throws at once what is no outage (a refused migration, a wrong query), and an outage longer than the wait', async () => {
    const wrong = Object.assign(new Error('relation "x" does not exist'), { code: '42P01' });
    await expect(whenDatabaseAnswers(() => Promise.reject(wrong), { warn: () => {} })).rejects.toBe(wrong);
    expect(isDatabaseUnavailable(wrong)).toBe(false);
    const e = terminated();
    await expect(whenDatabaseAnswers(() => Promise.reject(e), { warn: () => {} }, 0)).rejects.toBe(e);
  });
});
