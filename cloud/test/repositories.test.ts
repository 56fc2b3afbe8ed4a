import { CorruptRow, generateSigningKeyPair } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gatewayPublicJwk, getGateway } from '../src/adapters/db/gateways.js';
import { getKeySummary, listHistory, listKeys } from '../src/adapters/db/keys.js';
import { getPerson, getSite, recordPersonSite } from '../src/adapters/db/registry.js';
import { issueKey, revokeKey } from '../src/app/keys.js';
import { createPerson, registerGateway } from '../src/app/registry.js';
import { DAY, T0, deps, openTestDb, seed, type TestDb } from './helpers.js';

/** The repositories of adapters/db: the caller's site scope is a parameter, and rows are parsed once. */
describe.each(pgBackends())('repositories on %s', (backend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(backend);
  });
  afterAll(async () => {
    await t?.close();
  });

  const input = (s: Awaited<ReturnType<typeof seed>>) => ({
    personId: s.personId,
    doors: [s.doorA],
    credential: { type: 'pin' as const, value: '123456' },
    validFrom: T0,
    validUntil: T0 + DAY,
  });

  describe('when the caller sees only another site', () => {
    it('finds no site, gateway, person, key or history of this one', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      await recordPersonSite(t.db, s.personId, s.siteId);
      const o = await issueKey(d, input(s));
      expect(o.status).toBe('applied');
      const other = ['site-elsewhere'];
      expect(await getSite(t.db, other, s.siteId)).toBeNull();
      expect(await getGateway(t.db, other, s.gatewayId)).toBeNull();
      expect(await getPerson(t.db, other, s.personId)).toBeNull();
      const keyId = o.status === 'applied' ? o.state.id : '';
      expect(await getKeySummary(t.db, other, keyId)).toBeNull();
      expect(await listHistory(t.db, keyId, other)).toEqual([]);
      expect((await listKeys(t.db, other, { gatewayId: s.gatewayId, cursor: null, limit: 10 })).items).toEqual([]);
      // and the same reads with its own site find them
      expect(await getKeySummary(t.db, [s.siteId], keyId)).toMatchObject({ id: keyId, siteId: s.siteId, credentialType: 'pin' });
      expect((await listHistory(t.db, keyId, [s.siteId])).map((h) => h.event)).toEqual(['issue']);
    });

    it('the key verbs refuse its person, doors and keys as not found, and change nothing', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      await recordPersonSite(t.db, s.personId, s.siteId);
      const other = ['site-elsewhere'];
      expect(await issueKey(d, { ...input(s), siteScope: other })).toMatchObject({ status: 'refused', code: 'PERSON_NOT_FOUND' });
      const o = await issueKey(d, { ...input(s), siteScope: [s.siteId] });
      expect(o.status).toBe('applied');
      const keyId = o.status === 'applied' ? o.state.id : '';
      const before = await getKeySummary(t.db, null, keyId);
      expect(await revokeKey(d, { keyId, reason: 'staff_revoked', siteScope: other })).toMatchObject({
        status: 'refused',
        code: 'KEY_NOT_FOUND',
      });
      expect(await getKeySummary(t.db, null, keyId)).toEqual(before);
      expect(await revokeKey(d, { keyId, reason: 'staff_revoked', siteScope: [s.siteId] })).toMatchObject({ status: 'applied' });
    });

    it('a door of another site is not found even when the person is visible', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const s2 = await seed(d);
      await recordPersonSite(t.db, s.personId, s.siteId);
      const o = await issueKey(d, { ...input(s), doors: [s2.doorA], siteScope: [s.siteId] });
      expect(o).toMatchObject({ status: 'refused', code: 'DOOR_NOT_FOUND', detail: s2.doorA });
    });
  });

  describe("when the registry verbs are given the caller's sites", () => {
    it('createPerson refuses a site outside them as not found and writes nothing; inside, it records the site with the person', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const id = `person-scoped-${s.siteId}`;
      expect(await createPerson(d, { id, name: 'Aiko', siteId: s.siteId, siteScope: ['site-elsewhere'] })).toMatchObject({
        status: 'refused',
        code: 'SITE_NOT_FOUND',
      });
      expect(await getPerson(t.db, null, id)).toBeNull();
      expect(await createPerson(d, { id, name: 'Aiko', siteId: s.siteId, siteScope: [s.siteId] })).toMatchObject({ status: 'applied' });
      expect(await getPerson(t.db, [s.siteId], id)).toMatchObject({ id, sites: [s.siteId] });
    });

    it('registerGateway refuses a site outside them as not found, before it looks at the key, and registers nothing', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const pair = await generateSigningKeyPair();
      const cloud = { issuer: 'tobira-cloud', jwks: { keys: [] } };
      const gatewayId = `gw-scoped-${s.siteId}`.slice(0, 60);
      const bad = { ...pair.publicJwk, x: 'not-a-key' };
      expect(await registerGateway(d, cloud, { gatewayId, siteId: s.siteId, publicJwk: bad, siteScope: ['site-elsewhere'] })).toMatchObject(
        {
          status: 'refused',
          code: 'SITE_NOT_FOUND',
        },
      );
      expect(await getGateway(t.db, null, gatewayId)).toBeNull();
      expect(
        await registerGateway(d, cloud, { gatewayId, siteId: s.siteId, publicJwk: pair.publicJwk, siteScope: [s.siteId] }),
      ).toMatchObject({
        status: 'applied',
      });
    });
  });

  describe('when a row does not fit its schema', () => {
    it('the read throws CorruptRow naming the table, never a half-built value', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      await t.db.query(`UPDATE gateways SET public_jwk = '{"not":"a jwk"}'::jsonb WHERE id = $1`, [s.gatewayId]);
      await expect(gatewayPublicJwk(t.db, s.gatewayId)).rejects.toBeInstanceOf(CorruptRow);
      await expect(gatewayPublicJwk(t.db, s.gatewayId)).rejects.toThrow(/corrupt row in gateways: public_jwk/);
    });
  });
});
