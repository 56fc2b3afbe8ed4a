import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openPgliteDb } from '../src/adapters/db/pglite.js';

/** Every entry under `dir` with its permission bits. */
function modes(dir: string): { path: string; mode: number }[] {
  const out: { path: string; mode: number }[] = [];
  const walk = (p: string) => {
    const st = statSync(p);
    out.push({ path: p, mode: st.mode & 0o777 });
    if (st.isDirectory()) for (const n of readdirSync(p)) walk(join(p, n));
  };
  walk(dir);
  return out;
}

describe('the embedded database on disk', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('is reachable by its owner only: the folder 0700 and no entry group- or world-accessible, new or reopened', async () => {
    const parent = mkdtempSync(join(tmpdir(), 'tobira-pglite-modes-'));
    dirs.push(parent);
    chmodSync(parent, 0o755);
    const dir = join(parent, 'db');
    const db = await openPgliteDb(dir);
    await db.query('CREATE TABLE t (x int)');
    await db.close();
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(modes(dir).filter((e) => (e.mode & 0o077) !== 0)).toEqual([]);

    // a folder left open by an older version (or a copy made with a loose umask) is tightened at the next open
    chmodSync(dir, 0o755);
    const some = modes(dir).find((e) => e.path.endsWith('PG_VERSION'));
    if (some) chmodSync(some.path, 0o666);
    const again = await openPgliteDb(dir);
    await again.close();
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(modes(dir).filter((e) => (e.mode & 0o077) !== 0)).toEqual([]);
  });
});
