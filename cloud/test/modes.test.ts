import { type Schedule } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settleModeRequest } from '../src/adapters/db/modes.js';
import { getModeRequest, listSiteModeRequests, requestMode, type RequestModeInput } from '../src/app/modes.js';
import { deps, openTestDb, seed, type TestDb } from './helpers.js';

const LOBBY: Schedule = { timeZone: 'Asia/Tokyo', windows: [{ days: [1, 2, 3, 4, 5], start: '08:00', end: '20:00' }] };
const base = { scope: null, mode: null, passage: null, by: 'ops', reason: null, cid: 'cid-modes' } as unknown as Omit<
  RequestModeInput,
  'siteId'
>;

describe.each(pgBackends())('mode requests on %s', (pgBackend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(pgBackend);
  });
  afterAll(async () => {
    await t.close();
  });
  const outbox = (gatewayId: string) =>
    t.db.query<{ type: string; seq: string; jti: string; body: Record<string, unknown> }>(
      `SELECT type, seq, jti, body FROM outbox WHERE gateway_id = $1 ORDER BY seq`,
      [gatewayId],
    );

  it('queues one signed site.mode per gateway of the site in the same transaction, pending until the gateway acks', async () => {
    const d = deps(t.db);
    const s = await seed(d);
    const o = await requestMode(d, { ...base, siteId: s.siteId, mode: 'lockdown', reason: 'police request' });
    expect(o).toMatchObject({
      status: 'applied',
      code: 'MODE_REQUEST_QUEUED',
      state: { status: 'pending', mode: 'lockdown', requestedBy: 'ops' },
    });
    if (o.status !== 'applied') throw new Error('not applied');
    const rows = (await outbox(s.gatewayId)).rows;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ type: 'site.mode', body: { requestId: o.state.requestId, mode: 'lockdown', passage: [], by: 'ops' } });
    expect(o.state.gateways).toMatchObject([{ gatewayId: s.gatewayId, siteId: s.siteId, seq: Number(rows[0]!.seq), status: 'pending' }]);

    // the gateway's ack settles it, once
    const ack = { gatewayId: s.gatewayId, jti: rows[0]!.jti, result: 'applied' as const, code: 'MODE_APPLIED', at: 5 };
    expect(await t.db.transaction((tx) => settleModeRequest(tx, ack))).toBe('settled');
    expect(await t.db.transaction((tx) => settleModeRequest(tx, { ...ack, result: 'refused', code: 'APPLY_FAILED' }))).toBe('already');
    expect(await t.db.transaction((tx) => settleModeRequest(tx, { ...ack, jti: 'not-a-mode-jti' }))).toBe('unknown');
    expect(await getModeRequest(d, o.state.requestId, null)).toMatchObject({
      status: 'applied',
      gateways: [{ status: 'applied', code: 'MODE_APPLIED', settledAt: 5 }],
    });
    expect((await listSiteModeRequests(d, s.siteId, null))?.map((r) => r.requestId)).toEqual([o.state.requestId]);
  });

  it("another gateway's ack of the same jti settles nothing (acks are matched per gateway)", async () => {
    const d = deps(t.db);
    const s = await seed(d);
    const other = await seed(d);
    const o = await requestMode(d, { ...base, siteId: s.siteId, mode: 'lockdown' });
    if (o.status !== 'applied') throw new Error('not applied');
    const jti = (await outbox(s.gatewayId)).rows[0]!.jti;
    expect(
      await t.db.transaction((tx) =>
        settleModeRequest(tx, { gatewayId: other.gatewayId, jti, result: 'applied', code: 'MODE_APPLIED', at: 1 }),
      ),
    ).toBe('unknown');
    expect((await getModeRequest(d, o.state.requestId, null))?.status).toBe('pending');
  });

  it('passage names doors; absent doorIds means every door of the site; a door of another site is not found', async () => {
    const d = deps(t.db);
    const s = await seed(d);
    const elsewhere = await seed(d);
    const one = await requestMode(d, { ...base, siteId: s.siteId, passage: { doorIds: [s.doorA], schedule: LOBBY } });
    expect(one).toMatchObject({ status: 'applied', state: { gateways: [{ passage: [{ doorId: s.doorA, schedule: LOBBY }] }] } });
    const all = await requestMode(d, { ...base, siteId: s.siteId, passage: { doorIds: null, schedule: null } });
    expect(all).toMatchObject({
      status: 'applied',
      state: {
        gateways: [
          {
            passage: [
              { doorId: s.doorA, schedule: null },
              { doorId: s.doorB, schedule: null },
            ],
          },
        ],
      },
    });
    const before = (await outbox(s.gatewayId)).rows.length;
    expect(await requestMode(d, { ...base, siteId: s.siteId, passage: { doorIds: [elsewhere.doorA], schedule: LOBBY } })).toMatchObject({
      status: 'refused',
      code: 'DOOR_NOT_FOUND',
    });
    expect((await outbox(s.gatewayId)).rows.length).toBe(before);
  });

  it('every site in scope gets its own message; a scoped caller reaches only its sites and sees only its rows', async () => {
    const d = deps(t.db);
    const a = await seed(d);
    const b = await seed(d);
    const scoped = await requestMode(d, { ...base, scope: [a.siteId], siteId: null, mode: 'lockdown' });
    if (scoped.status !== 'applied') throw new Error('not applied');
    expect(scoped.state.gateways.map((g) => g.gatewayId)).toEqual([a.gatewayId]);
    expect((await outbox(b.gatewayId)).rows).toEqual([]);
    expect(await requestMode(d, { ...base, scope: [a.siteId], siteId: b.siteId, mode: 'lockdown' })).toMatchObject({
      status: 'refused',
      code: 'SITE_NOT_FOUND',
    });
    const every = await requestMode(d, { ...base, siteId: null, mode: 'normal' });
    if (every.status !== 'applied') throw new Error('not applied');
    expect(every.state.gateways.map((g) => g.gatewayId)).toEqual(expect.arrayContaining([a.gatewayId, b.gatewayId]));
    expect(await getModeRequest(d, every.state.requestId, [b.siteId])).toMatchObject({ gateways: [{ gatewayId: b.gatewayId }] });
    expect(await getModeRequest(d, scoped.state.requestId, [b.siteId])).toBeNull();
  });

  it('refuses an empty request and writes nothing', async () => {
    const d = deps(t.db);
    const s = await seed(d);
    expect(await requestMode(d, { ...base, siteId: s.siteId })).toMatchObject({ status: 'refused', code: 'MODE_REQUEST_EMPTY' });
    expect((await outbox(s.gatewayId)).rows).toEqual([]);
  });

  it('the database guards the status: pending only by requestMode, settled once only by settleModeRequest, final after', async () => {
    const d = deps(t.db);
    const s = await seed(d);
    const o = await requestMode(d, { ...base, siteId: s.siteId, mode: 'lockdown' });
    if (o.status !== 'applied') throw new Error('not applied');
    const jti = (await outbox(s.gatewayId)).rows[0]!.jti;
    const set = (status: string, verb: string | null) =>
      t.db.transaction(async (tx) => {
        if (verb !== null) await tx.query("SELECT set_config('tobira.verb', $1, true)", [verb]);
        return tx.query(`UPDATE mode_requests SET status = $2, settled_at = 9, code = 'X' WHERE jti = $1`, [jti, status]);
      });
    // no verb, another verb: refused; the row stays pending
    await expect(set('applied', null)).rejects.toThrow(/settleModeRequest/);
    await expect(set('applied', 'revokeKey')).rejects.toThrow(/settleModeRequest/);
    await expect(t.db.query(`UPDATE mode_requests SET status = 'refused', settled_at = 9 WHERE jti = $1`, [jti])).rejects.toThrow(
      /settleModeRequest/,
    );
    expect((await getModeRequest(d, o.state.requestId, null))?.status).toBe('pending');
    // the verb settles it; after that it is final, whatever the verb
    expect(
      await t.db.transaction((tx) =>
        settleModeRequest(tx, { gatewayId: s.gatewayId, jti, result: 'refused', code: 'APPLY_FAILED', at: 3 }),
      ),
    ).toBe('settled');
    await expect(set('applied', 'settleModeRequest')).rejects.toThrow(/refused -> applied is not a move of verb settleModeRequest/);
    await expect(
      t.db.transaction(async (tx) => {
        await tx.query("SELECT set_config('tobira.verb', 'settleModeRequest', true)");
        return tx.query(`UPDATE mode_requests SET status = 'pending', settled_at = NULL WHERE jti = $1`, [jti]);
      }),
    ).rejects.toThrow(/refused -> pending is not a move of verb settleModeRequest/);
    expect(await getModeRequest(d, o.state.requestId, null)).toMatchObject({ status: 'refused', gateways: [{ code: 'APPLY_FAILED' }] });
    // a row inserted outside requestMode, or inserted already settled, is refused
    const row = (verb: string | null, status: string) =>
      t.db.transaction(async (tx) => {
        if (verb !== null) await tx.query("SELECT set_config('tobira.verb', $1, true)", [verb]);
        return tx.query(
          `INSERT INTO mode_requests (request_id, gateway_id, site_id, mode, passage, requested_by, jti, seq, cid, requested_at, status, settled_at)
           VALUES (gen_random_uuid()::text, $1, $2, 'lockdown', '[]', 'x', gen_random_uuid()::text, 1, 'c', 1, $3, $4)`,
          [s.gatewayId, s.siteId, status, status === 'pending' ? null : 1],
        );
      });
    await expect(row(null, 'pending')).rejects.toThrow(/requestMode/);
    await expect(row('requestMode', 'applied')).rejects.toThrow(/mode_requests\.status — -> applied is not a move of verb requestMode/);
    expect((await row('requestMode', 'pending')).rowCount).toBe(1);
  });
});
