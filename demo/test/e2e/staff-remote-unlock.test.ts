import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, waitFor } from './system.js';

/**
 * A supervisor of the gateway's staff UI opens a sim door remotely: the
 * signed HMAC command reaches the firmware-sim lock and unlocks its bolt, the
 * access event reaches the cloud's audit with her name and reason, and her
 * staff actions (setup, remote unlock, sign-out) reach the cloud's
 * staff_actions, each exactly once. Real HTTP (cookie + CSRF header).
 */
describe('remote unlock and staff actions, end to end (embedded brokers and database)', () => {
  let sys: System;
  let base: string;
  let cookie = '';
  let csrf = '';
  beforeAll(async () => {
    sys = await new System('embedded', { gatewayOverrides: { http: { host: '127.0.0.1', port: 0 } } }).start();
    base = sys.gateway.httpUrl!;
  });
  afterAll(async () => {
    await sys.stop();
  });

  const post = (path: string, body: unknown) =>
    fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(cookie ? { cookie, 'x-csrf-token': csrf } : {}) },
      body: JSON.stringify(body),
    });

  it('the first supervisor is made with the one-time setup code and signed in', async () => {
    const code = sys.gateway.setupCode;
    expect(code).not.toBeNull();
    const r = await post('/staff/setup', {
      code: code!.code,
      username: 'aiko',
      displayName: 'Aiko Tanaka',
      password: 'supervisor password 1',
    });
    expect(r.status).toBe(200);
    cookie = (r.headers.get('set-cookie') ?? '').split(';')[0]!;
    csrf = ((await r.json()) as { csrfToken: string }).csrfToken;
    expect(cookie).toMatch(/^tobira_staff=/);
  });

  it('opens the sim door: its bolt unlocks by the HMAC command', async () => {
    const lock = sys.fleet.lock('L1');
    await waitFor(() => sys.gateway.store.lock('L1')?.online === true, 'L1 online at the gateway');
    expect(lock.bolt).toBe('locked');
    const r = await post('/staff/locks/L1/unlock', { reason: 'guest locked out, room 101' });
    expect(r.status).toBe(200);
    expect(await r.json()).toMatchObject({ status: 'applied', code: 'REMOTE_UNLOCK', warning: null });
    await waitFor(() => lock.bolt === 'unlocked', 'the sim bolt unlocked');
  });

  it('the cloud audit has the REMOTE_UNLOCK event once, with her name and the reason', async () => {
    const rows = await waitFor(async () => {
      const a = (await sys.cloud.listAudit({ gatewayId: sys.gatewayId })).filter((e) => e.code === 'REMOTE_UNLOCK');
      return a.length > 0 && a;
    }, 'the remote unlock in the cloud audit');
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      allowed: true,
      lockId: 'L1',
      doorId: sys.doors.L1,
      keyId: null,
      by: { name: 'Aiko Tanaka', reason: 'guest locked out, room 101' },
    });
  });

  it("the cloud has her staff actions, once each, scoped to the gateway's site", async () => {
    const out = await fetch(`${base}/staff/session`, { method: 'DELETE', headers: { cookie, 'x-csrf-token': csrf } });
    expect(out.status).toBe(200);
    const page = await waitFor(async () => {
      const p = await sys.cloud.listStaffActions([sys.siteId], { cursor: null, limit: 50 });
      return p.items.some((a) => a.action === 'sign_out') && p;
    }, 'staff actions in the cloud');
    expect(page.items.map((a) => [a.action, a.actor.name, a.result]).reverse()).toEqual([
      ['setup', 'Aiko Tanaka', 'applied'],
      ['remote_unlock', 'Aiko Tanaka', 'applied'],
      ['sign_out', 'Aiko Tanaka', 'applied'],
    ]);
    expect(page.items.find((a) => a.action === 'remote_unlock')).toMatchObject({
      target: 'L1',
      detail: 'guest locked out, room 101',
      siteId: sys.siteId,
    });
    expect((await sys.cloud.listStaffActions(['another-site'], { cursor: null, limit: 50 })).items).toEqual([]);
  });
});
