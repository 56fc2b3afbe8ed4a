import { newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, issueBody, openHarness, seedSite, snapshot, type Harness } from './harness.js';

describe.each(pgBackends())('admin API resources on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await openHarness(backend);
  });
  afterAll(async () => {
    await h?.close();
  });

  describe('sites', () => {
    it('an admin creates a site and gets 201 with the site', async () => {
      const r = await h.app.inject({
        method: 'POST',
        url: '/sites',
        headers: bearer(h.tokens.admin),
        payload: { name: 'Kyoto', timeZone: 'Asia/Tokyo' },
      });
      expect(r.statusCode).toBe(201);
      expect(r.json()).toMatchObject({ status: 'applied', code: 'MESSAGE_APPLIED', site: { name: 'Kyoto', offlineGraceSeconds: 300 } });
    });

    it('a taken site id is 422 ALREADY_EXISTS', async () => {
      const r = await h.app.inject({
        method: 'POST',
        url: '/sites',
        headers: bearer(h.tokens.admin),
        payload: { id: h.siteA, name: 'again' },
      });
      expect(r.statusCode).toBe(422);
      expect(r.json()).toMatchObject({ status: 'refused', code: 'ALREADY_EXISTS' });
    });

    it('a manager lists only its own sites', async () => {
      const r = await h.app.inject({ method: 'GET', url: '/sites', headers: bearer(h.tokens.managerA) });
      expect(r.statusCode).toBe(200);
      expect(r.json().items.map((s: { id: string }) => s.id)).toEqual([h.siteA]);
      expect((await h.app.inject({ method: 'GET', url: `/sites/${h.siteA}`, headers: bearer(h.tokens.managerA) })).statusCode).toBe(200);
    });
  });

  describe('gateways, doors, people', () => {
    it('registering a gateway answers its provisioning data; doors and people are created and read back', async () => {
      const s = await seedSite(h, h.siteA, h.tokens.managerA);
      expect(s.provisioning).toMatchObject({
        gatewayId: s.gatewayId,
        siteId: h.siteA,
        cloudIssuer: 'tobira-cloud',
        offlineGraceSeconds: 300,
        timeZone: 'Asia/Tokyo',
      });
      expect(s.provisioning.credentialPepper).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(s.provisioning.cloudJwks.keys.length).toBeGreaterThan(0);
      expect(s.provisioning.topics.down).toContain(s.gatewayId);
      const gw = await h.app.inject({ method: 'GET', url: `/gateways/${s.gatewayId}`, headers: bearer(h.tokens.managerA) });
      expect(gw.json()).toMatchObject({ gateway: { id: s.gatewayId, siteId: h.siteA } });
      expect(gw.json().gateway).not.toHaveProperty('credentialPepper');
      const doors = await h.app.inject({ method: 'GET', url: `/doors?gatewayId=${s.gatewayId}`, headers: bearer(h.tokens.managerA) });
      expect(doors.json().items).toEqual([expect.objectContaining({ id: s.doorId, siteId: h.siteA })]);
      const person = await h.app.inject({ method: 'GET', url: `/people/${s.personId}`, headers: bearer(h.tokens.managerA) });
      expect(person.json()).toMatchObject({ person: { id: s.personId, sites: [h.siteA] } });
      const list = await h.app.inject({ method: 'GET', url: `/gateways?siteId=${h.siteA}`, headers: bearer(h.tokens.auditorA) });
      expect(list.json().items.map((g: { id: string }) => g.id)).toContain(s.gatewayId);
    });

    it('shows on the gateway its clock skew, the seq handed out to it and its dead-lettered downlinks, for an operator to see why it fails closed', async () => {
      const s = await seedSite(h, h.siteA);
      const view = async () =>
        (await h.app.inject({ method: 'GET', url: `/gateways/${s.gatewayId}`, headers: bearer(h.tokens.managerA) })).json().gateway;
      expect(await view()).toMatchObject({ clockSkewMs: null, clockSkewAt: null, lastSeq: 0, deadLetters: 0 });
      // as the uplink inbox records a gateway clock 10 minutes ahead, and a downlink the dispatcher gave up on
      await h.cloud.db.query('UPDATE gateways SET clock_skew_ms = $2, clock_skew_at = $3 WHERE id = $1', [
        s.gatewayId,
        600_000,
        1_700_000_000_000,
      ]);
      await h.cloud.db.transaction(async (tx) => {
        const seq = (
          await tx.query<{ last_seq: number }>('UPDATE gateway_seq SET last_seq = last_seq + 1 WHERE gateway_id = $1 RETURNING last_seq', [
            s.gatewayId,
          ])
        ).rows[0]?.last_seq;
        await tx.query(
          `INSERT INTO outbox (gateway_id, seq, jti, type, body, cid, status, attempts, next_attempt_at, created_at) VALUES ($1, $2, gen_random_uuid(), 'key.revoke', '{}', 'cid-dead', 'dead', 5, 0, 0)`,
          [s.gatewayId, seq],
        );
      });
      expect(await view()).toMatchObject({ clockSkewMs: 600_000, clockSkewAt: 1_700_000_000_000, lastSeq: 1, deadLetters: 1 });
      const list = await h.app.inject({ method: 'GET', url: `/gateways?siteId=${h.siteA}`, headers: bearer(h.tokens.auditorA) });
      expect(list.json().items.find((g: { id: string }) => g.id === s.gatewayId)).toMatchObject({ clockSkewMs: 600_000, deadLetters: 1 });
      // and as metrics, for an admin's scraper (they name every gateway: other roles are refused)
      const m = await h.app.inject({ method: 'GET', url: '/metrics', headers: bearer(h.tokens.admin) });
      expect(m.statusCode).toBe(200);
      expect(m.headers['content-type']).toContain('text/plain');
      expect(m.body).toContain(`tobira_cloud_gateway_clock_skew_seconds{gateway_id="${s.gatewayId}"} 600`);
      expect(m.body).toContain(`tobira_cloud_gateway_dead_letters{gateway_id="${s.gatewayId}"} 1`);
      expect((await h.app.inject({ method: 'GET', url: '/metrics', headers: bearer(h.tokens.managerA) })).json()).toMatchObject({
        code: 'FORBIDDEN_ROLE',
      });
      expect((await h.app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(401);
    });

    it("the provisioning names the site's own time zone, not a default", async () => {
      const siteId = `site-lisbon-${newId().slice(-8)}`;
      const site = await h.app.inject({
        method: 'POST',
        url: '/sites',
        headers: bearer(h.tokens.admin),
        payload: { id: siteId, name: 'Lisbon', timeZone: 'Europe/Lisbon' },
      });
      expect(site.statusCode).toBe(201);
      const s = await seedSite(h, siteId);
      expect(s.provisioning).toMatchObject({ siteId, timeZone: 'Europe/Lisbon' });
      const other = await seedSite(h, h.siteA);
      expect(other.provisioning.timeZone).toBe('Asia/Tokyo');
    });

    it('a gateway id that is taken is 422 GATEWAY_ALREADY_EXISTS', async () => {
      const s = await seedSite(h, h.siteA);
      const r = await h.app.inject({
        method: 'POST',
        url: '/gateways',
        headers: bearer(h.tokens.admin),
        payload: { gatewayId: s.gatewayId, siteId: h.siteA, publicJwk: s.pair.publicJwk },
      });
      expect(r.statusCode).toBe(422);
      expect(r.json()).toMatchObject({ status: 'refused', code: 'GATEWAY_ALREADY_EXISTS' });
    });

    it('a door behind an unknown gateway is 404 GATEWAY_NOT_FOUND', async () => {
      const r = await h.app.inject({
        method: 'POST',
        url: '/doors',
        headers: bearer(h.tokens.admin),
        payload: { gatewayId: 'no-such-gw', name: 'X' },
      });
      expect(r.statusCode).toBe(404);
      expect(r.json()).toMatchObject({ status: 'refused', code: 'GATEWAY_NOT_FOUND' });
    });
  });

  describe('keys', () => {
    it('issue answers 202 with delivery pending, the cid lands in the outbox row, and the key goes active after the gateway acks', async () => {
      const s = await seedSite(h, h.siteA);
      const r = await h.app.inject({
        method: 'POST',
        url: '/keys',
        headers: { ...bearer(h.tokens.managerA), 'x-correlation-id': 'corr-issue-1' },
        payload: issueBody(s, { keyId: `key-${s.u}` }),
      });
      expect(r.statusCode).toBe(202);
      expect(r.headers['x-correlation-id']).toBe('corr-issue-1');
      expect(r.headers.etag).toBe('"1"');
      expect(r.json()).toMatchObject({
        status: 'applied',
        code: 'KEY_ISSUED',
        cid: 'corr-issue-1',
        delivery: 'pending',
        errors: [],
        key: { id: `key-${s.u}`, status: 'issuing', siteId: h.siteA },
      });
      const outbox = await h.cloud.db.query<{ cid: string; type: string }>('SELECT cid, type FROM outbox WHERE key_id = $1', [
        `key-${s.u}`,
      ]);
      expect(outbox.rows).toEqual([{ cid: 'corr-issue-1', type: 'key.grant' }]);
      const got = await h.app.inject({ method: 'GET', url: `/keys/key-${s.u}`, headers: bearer(h.tokens.auditorA) });
      expect(got.statusCode).toBe(200);
      expect(got.json()).toMatchObject({ key: { status: 'issuing', cid: 'corr-issue-1' }, delivery: 'pending' });
      expect(got.json().deliveries).toHaveLength(1);
      // the reply is built from the outcome, not read back: the view as it stood inside the transaction
      // (the grant pending, its seq taken at the commit)
      const { deliveries, ...view } = got.json() as { deliveries: Record<string, unknown>[] };
      expect(deliveries[0]?.seq).toEqual(expect.any(Number));
      expect(r.json()).toEqual({
        status: 'applied',
        code: 'KEY_ISSUED',
        cid: 'corr-issue-1',
        ...view,
        deliveries: deliveries.map((d) => ({ ...d, seq: null, status: 'pending', attempts: 0, lastError: null, sentAt: null })),
      });
    });

    describe('offline-capable (staff master) keys', () => {
      const grantOf = async (keyId: string) =>
        (
          await h.cloud.db.query<{ body: { key: Record<string, unknown> } }>(
            `SELECT body FROM outbox WHERE key_id = $1 AND type = 'key.grant'`,
            [keyId],
          )
        ).rows[0]?.body.key;

      it('a manager token may not issue one: 403 FORBIDDEN_ROLE, nothing written, nothing stored under its Idempotency-Key', async () => {
        const s = await seedSite(h, h.siteA);
        const before = await snapshot(h);
        const r = await h.app.inject({
          method: 'POST',
          url: '/keys',
          headers: { ...bearer(h.tokens.managerA), 'idempotency-key': `offline-${s.u}` },
          payload: issueBody(s, { keyId: `staff-${s.u}`, offlineCapable: true }),
        });
        expect(r.statusCode).toBe(403);
        expect(r.json()).toMatchObject({ status: 'refused', code: 'FORBIDDEN_ROLE' });
        expect(await snapshot(h)).toEqual(before);
        // the same manager still issues ordinary keys, and their grants carry no offline cap
        const plain = await h.app.inject({
          method: 'POST',
          url: '/keys',
          headers: bearer(h.tokens.managerA),
          payload: issueBody(s, { keyId: `plain-${s.u}`, offlineCapable: false }),
        });
        expect(plain.statusCode).toBe(202);
        expect(plain.json().key).toMatchObject({ offlineCapable: false, offlineMaxSeconds: null });
        expect(await grantOf(`plain-${s.u}`)).not.toHaveProperty('offlineMaxSeconds');
      });

      it('an admin token issues one; its grant carries the offline cap: the server cap (7 days) by default, or a lower one asked for', async () => {
        const s = await seedSite(h, h.siteA);
        const byDefault = await h.app.inject({
          method: 'POST',
          url: '/keys',
          headers: bearer(h.tokens.admin),
          payload: issueBody(s, { keyId: `staff-${s.u}`, offlineCapable: true }),
        });
        expect(byDefault.statusCode).toBe(202);
        expect(byDefault.json().key).toMatchObject({ offlineCapable: true, offlineMaxSeconds: 604_800 });
        expect(await grantOf(`staff-${s.u}`)).toMatchObject({ offlineCapable: true, offlineMaxSeconds: 604_800 });
        const lower = await h.app.inject({
          method: 'POST',
          url: '/keys',
          headers: bearer(h.tokens.admin),
          payload: issueBody(s, { keyId: `staff2-${s.u}`, offlineCapable: true, offlineMaxSeconds: 3600 }),
        });
        expect(lower.statusCode).toBe(202);
        expect(await grantOf(`staff2-${s.u}`)).toMatchObject({ offlineCapable: true, offlineMaxSeconds: 3600 });
      });

      it('a cap above the server cap is 422 OFFLINE_MAX_TOO_LONG, and a cap on an ordinary key is 422 INVALID_REQUEST; nothing written', async () => {
        const s = await seedSite(h, h.siteA);
        const before = await snapshot(h);
        const long = await h.app.inject({
          method: 'POST',
          url: '/keys',
          headers: bearer(h.tokens.admin),
          payload: issueBody(s, { offlineCapable: true, offlineMaxSeconds: 604_801 }),
        });
        expect(long.statusCode).toBe(422);
        expect(long.json()).toMatchObject({ status: 'refused', code: 'OFFLINE_MAX_TOO_LONG' });
        const stray = await h.app.inject({
          method: 'POST',
          url: '/keys',
          headers: bearer(h.tokens.managerA),
          payload: issueBody(s, { offlineMaxSeconds: 3600 }),
        });
        expect(stray.statusCode).toBe(422);
        expect(stray.json()).toMatchObject({ status: 'refused', code: 'INVALID_REQUEST' });
        expect(await snapshot(h)).toEqual(before);
      });
    });

    it('revoke with a reason answers 202, a second revoke is 200 noop KEY_ALREADY_REVOKED, and the history lists both', async () => {
      const s = await seedSite(h, h.siteA);
      const issued = await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.managerA), payload: issueBody(s) });
      const keyId = issued.json().key.id as string;
      const r = await h.app.inject({
        method: 'POST',
        url: `/keys/${keyId}/revoke`,
        headers: bearer(h.tokens.managerA),
        payload: { reason: 'credential_lost' },
      });
      expect(r.statusCode).toBe(202);
      expect(r.json()).toMatchObject({
        status: 'applied',
        code: 'KEY_REVOKE_QUEUED',
        key: { status: 'revoking', revokeReason: 'credential_lost' },
        delivery: 'pending',
      });
      const again = await h.app.inject({
        method: 'POST',
        url: `/keys/${keyId}/revoke`,
        headers: bearer(h.tokens.managerA),
        payload: { reason: 'credential_lost' },
      });
      expect(again.statusCode).toBe(200);
      expect(again.json()).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_REVOKED' });
      const hist = await h.app.inject({ method: 'GET', url: `/keys/${keyId}/history`, headers: bearer(h.tokens.auditorA) });
      expect(hist.json().items.map((x: { event: string }) => x.event)).toEqual(['issue', 'revoke']);
    });

    it('revoke with the current revision in If-Match is applied', async () => {
      const s = await seedSite(h, h.siteA);
      const issued = await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.managerA), payload: issueBody(s) });
      const r = await h.app.inject({
        method: 'POST',
        url: `/keys/${issued.json().key.id}/revoke`,
        headers: { ...bearer(h.tokens.managerA), 'if-match': issued.headers.etag as string },
        payload: { reason: 'staff_revoked' },
      });
      expect(r.statusCode).toBe(202);
    });

    it('issuing with a credential already live at the gateway is 422 CREDENTIAL_IN_USE', async () => {
      const s = await seedSite(h, h.siteA);
      const body = issueBody(s);
      expect((await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.admin), payload: body })).statusCode).toBe(202);
      const r = await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.admin), payload: body });
      expect(r.statusCode).toBe(422);
      expect(r.json()).toMatchObject({ status: 'refused', code: 'CREDENTIAL_IN_USE' });
      // under an Idempotency-Key: the refusal is judged by the insert's rows in the request's unit, which stays
      // usable to store the answer (no error to roll back), and a replay answers the same
      const again = { ...body, keyId: `again-${s.u}` };
      const headers = { ...bearer(h.tokens.admin), 'idempotency-key': `in-use-${s.u}` };
      const first = await h.app.inject({ method: 'POST', url: '/keys', headers, payload: again });
      expect([first.statusCode, first.json()]).toEqual([422, expect.objectContaining({ code: 'CREDENTIAL_IN_USE' })]);
      const replay = await h.app.inject({ method: 'POST', url: '/keys', headers, payload: again });
      expect([replay.statusCode, replay.headers['idempotent-replayed'], replay.json()]).toEqual([422, 'true', first.json()]);
      expect((await h.cloud.db.query('SELECT 1 FROM keys WHERE id = $1', [`again-${s.u}`])).rows).toEqual([]);
    });

    it('lists keys with filters and a cursor that walks every page once', async () => {
      const s = await seedSite(h, h.siteB, h.tokens.managerB);
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) {
        const r = await h.app.inject({
          method: 'POST',
          url: '/keys',
          headers: bearer(h.tokens.managerB),
          payload: issueBody(s, { keyId: `k${i}-${s.u}` }),
        });
        ids.push(r.json().key.id);
      }
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const q: string = `/keys?personId=${s.personId}&status=issuing&limit=2${cursor ? `&cursor=${cursor}` : ''}`;
        const page = await h.app.inject({ method: 'GET', url: q, headers: bearer(h.tokens.managerB) });
        expect(page.statusCode).toBe(200);
        seen.push(...page.json().items.map((k: { id: string }) => k.id));
        cursor = page.json().nextCursor;
      } while (cursor);
      expect(seen.sort()).toEqual([...ids].sort());
      const revoked = await h.app.inject({
        method: 'GET',
        url: `/keys?personId=${s.personId}&status=revoked`,
        headers: bearer(h.tokens.managerB),
      });
      expect(revoked.json().items).toEqual([]);
      const otherSite = await h.app.inject({ method: 'GET', url: `/keys?personId=${s.personId}`, headers: bearer(h.tokens.managerA) });
      expect(otherSite.json().items).toEqual([]);
    });
  });

  describe('access events', () => {
    it('are filtered by site, door, person, code and time range, paginated by cursor, and scoped to the token sites', async () => {
      const a = await seedSite(h, h.siteA);
      const b = await seedSite(h, h.siteB);
      // audit rows as the uplink inbox writes them (the uplink path itself is tested in cloud/test/uplink.test.ts)
      const insert = (gw: string, door: string, person: string | null, at: number, code: string) =>
        h.cloud.db.query(
          `INSERT INTO audit (event_id, gateway_id, seq, jti, lock_id, door_id, at, allowed, code, person_id, cid, received_at)
           VALUES (gen_random_uuid(), $1, $2, gen_random_uuid(), 'lock-1', $3, $4, $5, $6, $7, 'cid-ev', $4)`,
          [gw, at, door, at, code === 'ALLOWED', code, person],
        );
      const t0 = 1_800_000_000_000;
      for (let i = 0; i < 5; i++) await insert(a.gatewayId, a.doorId, a.personId, t0 + i, i % 2 === 0 ? 'ALLOWED' : 'UNKNOWN_CREDENTIAL');
      await insert(b.gatewayId, b.doorId, b.personId, t0 + 2, 'ALLOWED');
      const get = (q: string, token = h.tokens.managerA) =>
        h.app.inject({ method: 'GET', url: `/access-events?${q}`, headers: bearer(token) });
      const all = await get(`doorId=${a.doorId}`);
      expect(all.statusCode).toBe(200);
      expect(all.json().items.map((e: { at: number }) => e.at)).toEqual([0, 1, 2, 3, 4].map((i) => t0 + i));
      expect(all.json().items[0]).toMatchObject({ siteId: h.siteA, gatewayId: a.gatewayId, personId: a.personId, cid: 'cid-ev' });
      expect((await get(`gatewayId=${a.gatewayId}&code=UNKNOWN_CREDENTIAL`)).json().items).toHaveLength(2);
      expect((await get(`personId=${a.personId}&from=${t0 + 1}&to=${t0 + 3}`)).json().items.map((e: { at: number }) => e.at)).toEqual([
        t0 + 1,
        t0 + 2,
      ]);
      const pages: number[] = [];
      let cursor: string | null = null;
      do {
        const r = await get(`doorId=${a.doorId}&limit=2${cursor ? `&cursor=${cursor}` : ''}`);
        pages.push(...r.json().items.map((e: { at: number }) => e.at));
        cursor = r.json().nextCursor;
      } while (cursor);
      expect(pages).toEqual([0, 1, 2, 3, 4].map((i) => t0 + i));
      expect((await get(`doorId=${b.doorId}`)).json().items).toEqual([]);
      expect((await get(`doorId=${b.doorId}`, h.tokens.managerB)).json().items).toHaveLength(1);
      expect((await get(`gatewayId=${b.gatewayId}`, h.tokens.admin)).json().items).toHaveLength(1);
      const bad = await get('from=yesterday');
      expect([bad.statusCode, bad.json().code]).toEqual([400, 'BAD_REQUEST']);
    });
  });

  describe('dead letters', () => {
    it('a dead-lettered grant is listed, shown as a failed delivery on its key, and retried back to pending', async () => {
      const s = await seedSite(h, h.siteA);
      const issued = await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.admin), payload: issueBody(s) });
      const keyId = issued.json().key.id as string;
      // a row the dispatcher gave up on, made in one transaction (pending → sending → dead) so the live dispatcher never sees it pending
      await h.cloud.db.transaction(async (tx) => {
        const seq = (
          await tx.query<{ last_seq: number }>('UPDATE gateway_seq SET last_seq = last_seq + 1 WHERE gateway_id = $1 RETURNING last_seq', [
            s.gatewayId,
          ])
        ).rows[0]?.last_seq;
        const id = (
          await tx.query<{ id: number }>(
            `INSERT INTO outbox (gateway_id, seq, jti, type, key_id, key_version, body, cid, status, next_attempt_at, created_at)
             VALUES ($1,$2,gen_random_uuid(),'key.grant',$3,1,'{"key":{}}','cid-dead','pending',9e15,0) RETURNING id`,
            [s.gatewayId, seq, keyId],
          )
        ).rows[0]?.id;
        await tx.query(`UPDATE outbox SET status = 'sending', lease_token = gen_random_uuid(), lease_until = 9e15 WHERE id = $1`, [id]);
        await tx.query(
          `UPDATE outbox SET status = 'dead', lease_token = NULL, lease_until = NULL, last_error = 'broker said no' WHERE id = $1`,
          [id],
        );
      });
      const list = await h.app.inject({ method: 'GET', url: `/dead-letters?gatewayId=${s.gatewayId}`, headers: bearer(h.tokens.managerA) });
      expect(list.statusCode).toBe(200);
      const row = list.json().items[0];
      expect(row).toMatchObject({ gatewayId: s.gatewayId, keyId, lastError: 'broker said no', siteId: h.siteA });
      const key = await h.app.inject({ method: 'GET', url: `/keys/${keyId}`, headers: bearer(h.tokens.managerA) });
      expect(key.json()).toMatchObject({ delivery: 'failed', errors: [expect.objectContaining({ code: 'DELIVERY_DEAD_LETTERED' })] });
      expect(
        (await h.app.inject({ method: 'GET', url: `/dead-letters?gatewayId=${s.gatewayId}`, headers: bearer(h.tokens.managerB) })).json()
          .items,
      ).toEqual([]);
      expect(
        (await h.app.inject({ method: 'POST', url: `/dead-letters/${row.id}/retry`, headers: bearer(h.tokens.managerB) })).statusCode,
      ).toBe(404);
      const retry = await h.app.inject({ method: 'POST', url: `/dead-letters/${row.id}/retry`, headers: bearer(h.tokens.managerA) });
      expect(retry.statusCode).toBe(200);
      expect(retry.json()).toEqual({ status: 'applied', code: 'MESSAGE_APPLIED' });
      const again = await h.app.inject({ method: 'POST', url: `/dead-letters/${row.id}/retry`, headers: bearer(h.tokens.managerA) });
      expect(again.statusCode).toBe(404);
      expect(again.json()).toMatchObject({ code: 'DEAD_LETTER_NOT_FOUND' });
    });
  });
});
