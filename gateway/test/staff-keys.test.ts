import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { asDoorId, asKeyId, asPersonId } from '@tobira/shared';
import type { FastifyInstance } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type WritableDb } from '../src/adapters/sqlite/db.js';
import { saveSlot } from '../src/adapters/sqlite/keyset.js';
import { GatewayStore } from '../src/adapters/sqlite/store.js';
import { T0, grant } from './fixtures.js';
import { staffAppOver, walk } from './staff-helpers.js';

const TOKEN = 'staff-token-for-keys-tests';
const HOUR = 3600_000;

describe('GET /staff/keys: the keys on site, never the credential (real SQLite file)', () => {
  let dir: string;
  let db: WritableDb;
  let app: FastifyInstance;
  const put = (
    keyId: string,
    over: { personId?: string; doors?: string[]; validFrom?: number; validUntil?: number },
    status: 'active' | 'revoked' = 'active',
  ) => {
    const { personId, doors, ...times } = over;
    const g = grant({
      keyId: asKeyId(keyId),
      ...times,
      ...(personId === undefined ? {} : { personId: asPersonId(personId) }),
      ...(doors === undefined ? {} : { doors: doors.map(asDoorId) }),
    });
    db.transaction(() => saveSlot(db, keyId, { key: { grant: g, version: g.version, status }, tombstone: null }, 'cid-1', T0)).immediate();
    return g;
  };
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-keys-'));
    db = openDatabase(join(dir, 'g.sqlite'));
    app = staffAppOver(new GatewayStore(db), { staffToken: TOKEN, now: () => T0 });
  });
  afterEach(async () => {
    await app.close();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const get = (url: string) => app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${TOKEN}` } });

  it('lists person, doors, validity, schedule, status and version, and no digest anywhere', async () => {
    const g = put('key-aiko', { personId: 'guest-aiko', doors: ['door-101'], validFrom: T0 - HOUR, validUntil: T0 + HOUR });
    put('key-late', { personId: 'guest-ken', doors: ['door-102'], validFrom: T0 + HOUR, validUntil: T0 + 2 * HOUR });
    put('key-old', { personId: 'guest-mia', doors: ['door-103'], validFrom: T0 - 2 * HOUR, validUntil: T0 - HOUR }, 'revoked');
    const r = await get('/staff/keys');
    expect(r.statusCode).toBe(200);
    expect(r.body).not.toContain(g.credential.digest);
    expect(r.body).not.toContain('digest');
    const items = r.json<{ items: Record<string, unknown>[] }>().items;
    expect(items.map((k) => [k.keyId, k.personId, k.doors, k.status, k.validity, k.version])).toEqual([
      ['key-aiko', 'guest-aiko', ['door-101'], 'active', 'valid', g.version],
      ['key-late', 'guest-ken', ['door-102'], 'active', 'not_yet_valid', g.version],
      ['key-old', 'guest-mia', ['door-103'], 'revoked', 'expired', g.version],
    ]);
    expect(items[0]).toMatchObject({
      credentialType: g.credential.type,
      validFrom: T0 - HOUR,
      validUntil: T0 + HOUR,
      schedule: g.schedule,
    });
  });

  it('searches key, person and door ids (not the credential), filters by status, and pages', async () => {
    const g = put('key-aiko', { personId: 'guest-aiko', doors: ['door-101', 'door-lobby'] });
    put('key-ken', { personId: 'guest-ken', doors: ['door-102'] }, 'revoked');
    const ids = async (url: string) => (await get(url)).json<{ items: { keyId: string }[] }>().items.map((k) => k.keyId);
    expect(await ids('/staff/keys?q=AIKO')).toEqual(['key-aiko']);
    expect(await ids('/staff/keys?q=lobby')).toEqual(['key-aiko']);
    expect(await ids('/staff/keys?q=102')).toEqual(['key-ken']);
    expect(await ids(`/staff/keys?q=${encodeURIComponent(g.credential.digest.slice(0, 8))}`)).toEqual([]);
    expect(await ids('/staff/keys?q=%25')).toEqual([]);
    expect(await ids('/staff/keys?status=revoked')).toEqual(['key-ken']);
    for (let i = 0; i < 5; i++) put(`key-${i}`, {});
    const all = await walk<{ keyId: string }>(app, TOKEN, '/staff/keys', { limit: '2' });
    expect(all.items.map((k) => k.keyId)).toEqual(['key-0', 'key-1', 'key-2', 'key-3', 'key-4', 'key-aiko', 'key-ken']);
    expect(all.pages).toBe(4);
    expect((await get('/staff/keys?cursor=bad')).statusCode).toBe(400);
  });
});
