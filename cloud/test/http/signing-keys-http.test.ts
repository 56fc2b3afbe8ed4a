import { generateSigningKeyPair, newId, systemClock, type KeyPairJwk } from '@tobira/shared';
import { pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAdminCli } from '../../src/admin-cli.js';
import { startAdminApi, type AdminApi } from '../../src/cloud.js';
import { createApiToken } from '../../src/adapters/db/tokens.js';
import { recordDeliveryAck } from '../../src/adapters/db/signing-keys.js';
import { startCloud } from '../cloud-helpers.js';
import { openTestDb, testLog, type TestDb } from '../helpers.js';

/**
 * Signing-key rotation through the admin API and the CLI: the
 * public JWKS never shows a private part nor a staged or retired key; the
 * steps are admin-only, in order, and each refuses out of turn with a code.
 */
describe.each(pgBackends())('signing keys over HTTP and the CLI on %s', (backend) => {
  let t: TestDb;
  let broker: MqttTestBroker;
  let cloud: Awaited<ReturnType<typeof startCloud>>;
  let api: AdminApi;
  let admin: string;
  let auditor: string;
  let k1: KeyPairJwk;
  let k2: KeyPairJwk;
  const gatewayId = `gw-sig-${newId().slice(-8)}`;

  const start = async (keys: KeyPairJwk[]) => {
    cloud = await startCloud(t, broker.url, { env: { CLOUD_SIGNING_JWK: JSON.stringify(keys.map((k) => k.privateJwk)) } });
    api = await startAdminApi({ cloud, db: cloud.db, log: testLog, clock: systemClock, webhooks: false });
  };
  const stop = async () => {
    await api?.close();
    await cloud?.stop();
  };
  async function cli(...argv: string[]): Promise<{ code: number; status: number; json: Record<string, unknown>; err: string }> {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runAdminCli(argv, {
      env: { TOBIRA_API: api.url, TOBIRA_TOKEN: admin },
      out: (s) => out.push(s),
      err: (s) => err.push(s),
    });
    const text = out.join('\n') || err.join('\n');
    const m = /^(\d{3}) ([\s\S]*)$/.exec(text);
    return { code, status: Number(m?.[1] ?? 0), json: m ? (JSON.parse(m[2] ?? '{}') as Record<string, unknown>) : {}, err: err.join('\n') };
  }
  const jwks = async () => {
    const res = await fetch(`${api.url}/.well-known/jwks.json`);
    return { status: res.status, body: (await res.json()) as { keys: Record<string, unknown>[] } };
  };

  beforeAll(async () => {
    t = await openTestDb(backend);
    broker = await startMqttBackend('aedes');
    [k1, k2] = await Promise.all([generateSigningKeyPair(), generateSigningKeyPair()]);
    await start([k1]);
    admin = (await createApiToken(cloud.db, { name: 'admin', role: 'admin' })).token;
    const site = await cloud.createSite({ id: `site-${gatewayId}`, name: 'Sig', timeZone: 'Asia/Tokyo', offlineGraceSeconds: 300 });
    expect(site.status).toBe('applied');
    auditor = (await createApiToken(cloud.db, { name: 'auditor', role: 'auditor', sites: [`site-${gatewayId}`] })).token;
    const gw = await generateSigningKeyPair();
    expect((await cloud.registerGateway({ gatewayId, siteId: `site-${gatewayId}`, publicJwk: gw.publicJwk })).status).toBe('applied');
    // the "add" step: the new key in CLOUD_SIGNING_JWK, the cloud restarted
    await stop();
    await start([k1, k2]);
  });
  afterAll(async () => {
    await stop();
    await broker?.stop();
    await t?.close();
  });

  it('the JWKS is public, shows the signer only (k2 is staged), and never a private part', async () => {
    const j = await jwks();
    expect(j.status).toBe(200);
    expect(j.body.keys.map((k) => k.kid)).toEqual([k1.kid]);
    expect(j.body.keys[0]).toMatchObject({ kty: 'OKP', crv: 'Ed25519', use: 'sig', alg: 'EdDSA', x: k1.publicJwk.x });
    expect(typeof j.body.keys[0]?.nbf).toBe('number');
    expect(JSON.stringify(j.body)).not.toContain(String(k1.privateJwk.d));
    expect(JSON.stringify(j.body)).not.toContain(String(k2.privateJwk.d));
    expect(j.body.keys.every((k) => !('d' in k))).toBe(true);
  });

  it('the steps are admin-only: an auditor token gets 403 FORBIDDEN_ROLE and changes nothing; no token is 401', async () => {
    const asAuditor = await fetch(`${api.url}/signing-keys/${k2.kid}/publish`, {
      method: 'POST',
      headers: { authorization: `Bearer ${auditor}`, 'idempotency-key': newId() },
    });
    expect(asAuditor.status).toBe(403);
    expect(await asAuditor.json()).toMatchObject({ code: 'FORBIDDEN_ROLE' });
    expect((await fetch(`${api.url}/signing-keys`, { headers: { authorization: `Bearer ${auditor}` } })).status).toBe(403);
    expect((await fetch(`${api.url}/signing-keys`)).status).toBe(401);
    expect((await cloud.listSigningKeys()).find((k) => k.kid === k2.kid)?.status).toBe('staged');
  });

  it('runs publish → switch → resign → retire through the CLI, each step refused out of turn with its code', async () => {
    const list = await cli('signing', 'list');
    expect(list.code).toBe(0);
    expect(list.json.items).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ kid: k1.kid, status: 'signing', loaded: true }),
        expect.objectContaining({ kid: k2.kid, status: 'staged', loaded: true }),
      ]),
    );
    expect(await cli('signing', 'rotate', 'switch', `--kid=${k2.kid}`)).toMatchObject({
      code: 1,
      status: 422,
      json: { code: 'SIGNING_KEY_NOT_PUBLISHED' },
    });
    expect(await cli('signing', 'rotate', 'retire', `--kid=${k1.kid}`)).toMatchObject({
      code: 1,
      status: 422,
      json: { code: 'SIGNING_KEY_IS_SIGNER' },
    });
    expect(await cli('signing', 'rotate', 'switch', 'no-such-kid')).toMatchObject({
      code: 1,
      status: 404,
      json: { code: 'SIGNING_KEY_NOT_FOUND' },
    });

    const pub = await cli('signing', 'rotate', 'publish', `--kid=${k2.kid}`);
    expect(pub).toMatchObject({ code: 0, status: 200, json: { status: 'applied', code: 'SIGNING_KEY_PUBLISHED', queued: 1 } });
    expect((await jwks()).body.keys.map((k) => k.kid)).toEqual([k1.kid, k2.kid]);
    const refused = await cli('signing', 'rotate', 'switch', `--kid=${k2.kid}`);
    expect(refused).toMatchObject({ code: 1, status: 422, json: { code: 'SIGNING_KEY_NOT_DELIVERED' } });
    expect(String(refused.json.detail)).toContain(gatewayId);
    // the gateway applies the keyset.update (the uplink inbox records its ack by the message's jti)
    const jti = await cloud.db.query<{ jti: string }>('SELECT jti FROM signing_key_deliveries WHERE kid = $1 AND gateway_id = $2', [
      k2.kid,
      gatewayId,
    ]);
    expect(
      await recordDeliveryAck(cloud.db, { gatewayId, jti: jti.rows[0]?.jti ?? '', result: 'applied', code: 'KEYSET_UPDATED' }, Date.now()),
    ).toBe(1);
    expect(await cli('signing', 'rotate', 'publish', `--kid=${k2.kid}`)).toMatchObject({
      status: 200,
      json: { status: 'noop', code: 'SIGNING_KEY_ALREADY_PUBLISHED' },
    });

    const sw = await cli('signing', 'rotate', 'switch', `--kid=${k2.kid}`, '--retire-after-seconds', '600');
    expect(sw).toMatchObject({ code: 0, status: 200, json: { status: 'applied', code: 'SIGNING_KEY_SWITCHED' } });
    expect(cloud.jwks.keys[0]?.kid).toBe(k2.kid);
    const old = (await cloud.listSigningKeys()).find((k) => k.kid === k1.kid);
    expect(old).toMatchObject({ status: 'previous' });
    expect(typeof (await jwks()).body.keys.find((k) => k.kid === k1.kid)?.retire_after).toBe('number');
    expect(await cli('signing', 'rotate', 'retire', `--kid=${k1.kid}`)).toMatchObject({
      code: 1,
      status: 422,
      json: { code: 'SIGNING_KEY_RESIGN_PENDING' },
    });

    expect(await cli('signing', 'rotate', 'resign')).toMatchObject({
      code: 0,
      status: 200,
      json: { status: 'applied', code: 'SIGNING_KEY_RESIGN_QUEUED' },
    });
    expect(await cli('signing', 'rotate', 'retire', `--kid=${k1.kid}`)).toMatchObject({
      code: 0,
      status: 200,
      json: { status: 'applied', code: 'SIGNING_KEY_RETIRED', queued: 1 },
    });
    expect(await cli('signing', 'rotate', 'retire', `--kid=${k1.kid}`)).toMatchObject({
      status: 200,
      json: { status: 'noop', code: 'SIGNING_KEY_ALREADY_RETIRED' },
    });
    // a retired key never comes back
    expect(await cli('signing', 'rotate', 'publish', `--kid=${k1.kid}`)).toMatchObject({
      status: 422,
      json: { code: 'SIGNING_KEY_WRONG_STATE' },
    });
    expect(await cli('signing', 'rotate', 'switch', `--kid=${k1.kid}`)).toMatchObject({
      status: 422,
      json: { code: 'SIGNING_KEY_WRONG_STATE' },
    });
    expect((await jwks()).body.keys.map((k) => k.kid)).toEqual([k2.kid]);
    // the outbox holds the two keyset.update rows for the gateway: add k2, then retire k1
    const rows = await cloud.db.query<{ type: string; body: { add: { jwk: { kid: string } }[]; retire: { kid: string }[] } }>(
      "SELECT type, body FROM outbox WHERE gateway_id = $1 AND type = 'keyset.update' ORDER BY seq",
      [gatewayId],
    );
    expect(rows.rows.map((r) => [r.body.add.map((a) => a.jwk.kid), r.body.retire.map((x) => x.kid)])).toEqual([
      [[k2.kid], []],
      [[], [k1.kid]],
    ]);
  });

  it('signing rotate add prints a new private JWK locally (no API call) and says what to do with it', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runAdminCli(['signing', 'rotate', 'add'], { env: {}, out: (s) => out.push(s), err: (s) => err.push(s) });
    expect(code).toBe(0);
    const k = JSON.parse(out.join('\n')) as { kid: string; privateJwk: { d?: string; kid?: string } };
    expect(k.privateJwk).toMatchObject({ kid: k.kid, kty: 'OKP', crv: 'Ed25519' });
    expect(typeof k.privateJwk.d).toBe('string');
    expect(err.join('\n')).toContain('CLOUD_SIGNING_JWK');
  });
});
