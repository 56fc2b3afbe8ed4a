import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateSigningKeyPair, newId, systemClock } from '@tobira/shared';
import { pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAdminCli } from '../../src/admin-cli.js';
import { startAdminApi, type AdminApi } from '../../src/cloud.js';
import { authenticate } from '../../src/adapters/db/tokens.js';
import { startCloud } from '../cloud-helpers.js';
import { DAY, T0, openTestDb, testLog, type TestDb } from '../helpers.js';

describe.each(pgBackends())('admin CLI against a listening API on %s', (backend) => {
  let t: TestDb;
  let broker: MqttTestBroker;
  let cloud: Awaited<ReturnType<typeof startCloud>>;
  let api: AdminApi;
  let token: string;
  beforeAll(async () => {
    t = await openTestDb(backend);
    broker = await startMqttBackend('aedes');
    cloud = await startCloud(t, broker.url);
    api = await startAdminApi({
      cloud,
      db: cloud.db,
      log: testLog,
      clock: systemClock,
      webhooks: false,
      config: { webhookAllowPrivateNetworks: true },
    });
  });
  afterAll(async () => {
    await api?.close();
    await cloud?.stop();
    await broker?.stop();
    await t?.close();
  });

  async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string; json: Record<string, unknown> }> {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runAdminCli(argv, {
      env: { TOBIRA_API: api.url, TOBIRA_TOKEN: token },
      out: (s) => out.push(s),
      err: (s) => err.push(s),
      db: cloud.db,
    });
    const text = (out.join('\n') || err.join('\n')).replace(/^\d{3} /, '');
    let json: Record<string, unknown> = {};
    try {
      json = JSON.parse(text) as Record<string, unknown>;
    } catch {
      // usage text
    }
    return { code, out: out.join('\n'), err: err.join('\n'), json };
  }

  it('bootstraps an admin token, then sets up a site and issues, reads and revokes a key through the API', async () => {
    const boot = await cli('tokens', 'bootstrap', '--name', 'ops');
    expect(boot.code).toBe(0);
    token = boot.json.token as string;
    expect(await authenticate(cloud.db, token, Date.now())).toMatchObject({
      kind: 'ok',
      principal: { role: 'admin', sites: null },
      expiresAt: null,
    });
    const u = newId().slice(-8);
    expect((await cli('sites', 'create', '--id', `s-${u}`, '--name', 'Kyoto')).code).toBe(0);
    const jwkFile = join(tmpdir(), `jwk-${u}.json`);
    await writeFile(jwkFile, JSON.stringify((await generateSigningKeyPair()).publicJwk));
    const gw = await cli('gateways', 'register', '--id', `gw-${u}`, '--site', `s-${u}`, '--jwk-file', jwkFile);
    expect(gw.code).toBe(0);
    expect(gw.json).toMatchObject({ status: 'applied', provisioning: { gatewayId: `gw-${u}` } });
    expect((await cli('doors', 'create', '--id', `d-${u}`, '--gateway', `gw-${u}`, '--name', 'Front')).code).toBe(0);
    expect((await cli('people', 'create', '--id', `p-${u}`, '--site', `s-${u}`, '--name', 'Hana')).code).toBe(0);
    const issued = await cli(
      'keys',
      'issue',
      '--id',
      `k-${u}`,
      '--person',
      `p-${u}`,
      '--door',
      `d-${u}`,
      '--pin',
      '246810',
      '--from',
      new Date(T0).toISOString(),
      '--until',
      String(T0 + DAY),
      '--cid',
      `cli-${u}`,
    );
    expect(issued.code).toBe(0);
    expect(issued.json).toMatchObject({ status: 'applied', code: 'KEY_ISSUED', cid: `cli-${u}`, delivery: 'pending' });
    expect((await cli('keys', 'get', `k-${u}`)).json).toMatchObject({ key: { id: `k-${u}`, status: 'issuing' } });
    expect(((await cli('keys', 'list', '--person', `p-${u}`)).json.items as unknown[]).length).toBe(1);
    const stale = await cli('keys', 'revoke', `k-${u}`, '--reason', 'credential_lost', '--if-match', '9');
    expect(stale.code).toBe(1);
    expect(stale.json).toMatchObject({ code: 'KEY_STATE_CHANGED' });
    const revoked = await cli('keys', 'revoke', `k-${u}`, '--reason', 'credential_lost', '--if-match', '1');
    expect(revoked.json).toMatchObject({ status: 'applied', code: 'KEY_REVOKE_QUEUED' });
    expect(((await cli('keys', 'history', `k-${u}`)).json.items as unknown[]).length).toBe(2);
    expect((await cli('events', '--site', `s-${u}`, '--from', '2026-01-01T00:00:00Z')).json).toMatchObject({ items: [] });
    expect((await cli('dead-letters', 'list', '--site', `s-${u}`)).json).toMatchObject({ items: [] });
    const wh = await cli(
      'webhooks',
      'create',
      '--site',
      `s-${u}`,
      '--url',
      'http://127.0.0.1:9/hook',
      '--event',
      'alarm',
      '--event',
      'access.event',
    );
    expect(wh.json).toMatchObject({
      status: 'applied',
      webhook: { events: ['alarm', 'access.event'] },
      secret: expect.stringMatching(/^whsec_/),
    });
    expect((await cli('webhooks', 'disable', (wh.json.webhook as { id: string }).id)).json).toMatchObject({ status: 'applied' });
  });

  it('creates a token with a lifetime and rotates it: the new one works, the old one is revoked with --grace-seconds 0', async () => {
    const u = newId().slice(-8);
    const made = await cli('tokens', 'create', '--name', `pms-${u}`, '--role', 'manager', '--site', 'kyoto', '--expires-in-days', '5');
    expect(made.code).toBe(0);
    expect(made.json).toMatchObject({ status: 'applied', role: 'manager', sites: ['kyoto'], expiresAt: expect.any(Number) });
    const oldToken = made.json.token as string;
    const expiresAt = made.json.expiresAt as number;
    expect(expiresAt - Date.now()).toBeGreaterThan(4 * DAY);
    expect(expiresAt - Date.now()).toBeLessThanOrEqual(5 * DAY);
    const rotated = await cli('tokens', 'rotate', made.json.id as string, '--grace-seconds', '0', '--expires-in-days', '30');
    expect(rotated.code).toBe(0);
    expect(rotated.json).toMatchObject({
      status: 'applied',
      name: `pms-${u}`,
      role: 'manager',
      sites: ['kyoto'],
      rotatedFrom: { id: made.json.id, revokedAt: expect.any(Number) },
    });
    expect(await authenticate(cloud.db, rotated.json.token as string, Date.now())).toMatchObject({
      kind: 'ok',
      principal: { role: 'manager', sites: ['kyoto'] },
    });
    expect(await authenticate(cloud.db, oldToken, Date.now())).toEqual({ kind: 'unknown' });
    const again = await cli('tokens', 'rotate', made.json.id as string);
    expect(again.code).toBe(1);
    expect(again.json).toMatchObject({ status: 'refused', code: 'TOKEN_REVOKED' });
    const bad = await cli('tokens', 'rotate', made.json.id as string, '--grace-seconds', 'soon');
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--grace-seconds');
    expect((await cli('help')).out).toContain('tokens rotate <id>');
  });

  it('a refusal exits 1 with the code; bad usage exits 2 with the help', async () => {
    const r = await cli('keys', 'get', 'no-such-key');
    expect(r.code).toBe(1);
    expect(r.json).toMatchObject({ status: 'refused', code: 'KEY_NOT_FOUND' });
    const u = await cli('keys', 'issue', '--person', 'p');
    expect(u.code).toBe(2);
    expect(u.err).toContain('usage:');
  });
});
