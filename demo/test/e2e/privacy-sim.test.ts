import { asKeyId, type Schedule } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { SimLock } from '@tobira/firmware-sim';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { accessLog } from '../../../gateway/src/adapters/sqlite/access-log.js';
import { lockModesOf } from '../../../gateway/src/adapters/sqlite/modes.js';
import { decide, type KeySetView } from '../../../gateway/src/domain/decide.js';
import { decideRemoteUnlock } from '../../../gateway/src/domain/remote-unlock.js';
import { DOOR, LOCK, T0, grant } from '../../../gateway/test/fixtures.js';
import { createGateway, type Gateway } from '../../../gateway/src/gateway.js';
import {
  FakeLock,
  PIN,
  STAFF_PIN,
  STAFF_TOKEN,
  provision,
  runSite,
  silentLog,
  waitFor,
  type Running,
} from '../../../gateway/test/harness.js';

describe('privacy rules', () => {
  const guest = { grant: grant(), version: 1, status: 'active' as const };
  const staff = { grant: grant({ keyId: asKeyId('key-staff'), offlineCapable: true }), version: 1, status: 'active' as const };
  const keys = (k: typeof guest): KeySetView => ({ byCredential: () => [k] });
  const site = { mode: 'normal' as const, leaseExpiresAt: T0 + 60_000 };
  const lock = (privacy: boolean) => ({ doorId: DOOR, failures: 0, lockedOutUntil: null, privacy });
  const req = { lockId: LOCK, credentialType: 'pin' as const, digest: 'x' };

  it('refuses a staff (offline-capable) key with PRIVACY_ACTIVE while privacy is on; the guest key still opens', () => {
    expect(decide(req, keys(staff as never), lock(true), site, T0)).toMatchObject({ allowed: false, code: 'PRIVACY_ACTIVE' });
    expect(decide(req, keys(guest as never), lock(true), site, T0)).toMatchObject({ allowed: true, code: 'ALLOWED' });
    expect(decide(req, keys(staff as never), lock(false), site, T0)).toMatchObject({ allowed: true, code: 'ALLOWED' });
    // lockdown lets staff keys pass, privacy does not
    expect(decide(req, keys(staff as never), lock(true), { ...site, mode: 'lockdown' }, T0)).toMatchObject({ code: 'PRIVACY_ACTIVE' });
  });

  it('a supervisor passes privacy only with the emergency flag, and then as PRIVACY_OVERRIDE; lockdown still wins', () => {
    const base = { role: 'supervisor' as const, reason: 'no answer, guest unwell', mode: 'normal' as const, failClosedReason: null };
    expect(decideRemoteUnlock({ ...base, lock: { online: true, privacy: true } })).toEqual({ allowed: false, code: 'PRIVACY_ACTIVE' });
    expect(decideRemoteUnlock({ ...base, lock: { online: true, privacy: true }, emergency: true })).toEqual({
      allowed: true,
      reason: 'no answer, guest unwell',
      warning: null,
      code: 'PRIVACY_OVERRIDE',
    });
    expect(decideRemoteUnlock({ ...base, lock: { online: true, privacy: false }, emergency: true })).toEqual({
      allowed: true,
      reason: 'no answer, guest unwell',
      warning: null,
    });
    expect(decideRemoteUnlock({ ...base, mode: 'lockdown', lock: { online: true, privacy: true }, emergency: true })).toEqual({
      allowed: false,
      code: 'SITE_LOCKDOWN',
    });
    expect(decideRemoteUnlock({ ...base, role: 'staff', lock: { online: true, privacy: true }, emergency: true })).toEqual({
      allowed: false,
      code: 'NOT_SUPERVISOR',
    });
  });
});

describe.each(mqttBackends())('privacy at a gateway with a firmware-sim lock (%s)', (backend) => {
  let broker: MqttTestBroker;
  let s: Running;
  let sim: SimLock;
  let cookie = '';
  let csrf = '';

  beforeEach(async () => {
    broker = await startMqttBackend(backend);
    s = await runSite(broker.url, broker.url, broker.unique);
    sim = new SimLock({
      url: broker.url,
      gatewayId: s.f.gatewayId,
      lockId: 'lock-1',
      secret: s.f.lockSecret,
      clock: s.f.clock,
      timers: 'manual',
      log: silentLog(),
    });
    await sim.start();
    await provision(s);
    await s.cloud.grant({ keyId: asKeyId('key-staff'), credential: { type: 'pin', digest: s.f.digest(STAFF_PIN) }, offlineCapable: true });
    await s.cloud.heartbeat();
    await waitFor(() => s.gw.store.settings().appliedSeq >= 2 && s.gw.store.lock('lock-1')?.online === true, 'staff key applied');
    const code = s.gw.setupCode!;
    const r = await fetch(`${s.gw.httpUrl}/staff/setup`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ code: code.code, username: 'aiko', displayName: 'Aiko Tanaka', password: 'supervisor password 1' }),
    });
    expect(r.status).toBe(200);
    cookie = (r.headers.get('set-cookie') ?? '').split(';')[0]!;
    csrf = ((await r.json()) as { csrfToken: string }).csrfToken;
  });
  afterEach(async () => {
    await sim?.stop();
    await s?.close();
    await broker.stop();
  });

  const unlock = async (body: unknown, auth: 'supervisor' | 'token' = 'supervisor') => {
    const r = await fetch(`${s.gw.httpUrl}/staff/locks/lock-1/unlock`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(auth === 'supervisor' ? { cookie, 'x-csrf-token': csrf } : { authorization: `Bearer ${STAFF_TOKEN}` }),
      },
      body: JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };
  const pin = async (value: string) => (await sim.present({ type: 'pin', value }, { timeoutMs: 5000 })).decision?.code;

  it('the thumb-turn keeps staff keys and staff remote unlocks out, the guest key opens, leaving clears it', async () => {
    expect(await pin(STAFF_PIN)).toBe('ALLOWED');
    await sim.privacyOn();
    await waitFor(() => lockModesOf(s.gw.store.db, 'lock-1')?.privacySince != null, 'privacy on at the gateway');

    expect(await pin(STAFF_PIN)).toBe('PRIVACY_ACTIVE');
    expect(await pin(PIN)).toBe('ALLOWED');
    expect(await unlock({ reason: 'housekeeping' })).toEqual({ status: 409, body: { code: 'PRIVACY_ACTIVE' } });
    // a staff member (the API token is a staff actor) cannot claim an emergency
    expect(await unlock({ reason: 'housekeeping', emergency: true }, 'token')).toEqual({ status: 403, body: { code: 'NOT_SUPERVISOR' } });

    // the guest leaves by the inside handle: privacy clears
    await sim.exit();
    await waitFor(() => lockModesOf(s.gw.store.db, 'lock-1')?.privacySince === null, 'privacy cleared on exit');
    expect(await pin(STAFF_PIN)).toBe('ALLOWED');
    const ev = await waitFor(() => s.cloud.ofType('access.event').find((e) => e.body.code === 'PRIVACY_ACTIVE'), 'the refusal uplink');
    expect(ev.body).toMatchObject({ allowed: false, keyId: 'key-staff', lockId: 'lock-1' });
  });

  it("a supervisor's emergency entry opens the sim door, flagged PRIVACY_OVERRIDE in the access log, the uplink and the staff audit", async () => {
    await sim.privacyOn();
    await waitFor(() => lockModesOf(s.gw.store.db, 'lock-1')?.privacySince != null, 'privacy on at the gateway');
    const r = await unlock({ reason: 'no answer for 2 days, guest unwell', emergency: true });
    expect(r).toMatchObject({ status: 200, body: { status: 'applied', code: 'PRIVACY_OVERRIDE' } });
    await waitFor(() => sim.bolt === 'unlocked', 'the sim bolt unlocked');
    expect(accessLog(s.gw.store.db)[0]).toMatchObject({
      code: 'PRIVACY_OVERRIDE',
      allowed: true,
      by: { name: 'Aiko Tanaka', reason: 'no answer for 2 days, guest unwell' },
    });
    const ev = await waitFor(() => s.cloud.ofType('access.event').find((e) => e.body.code === 'PRIVACY_OVERRIDE'), 'uplink');
    expect(ev.body.by).toMatchObject({ name: 'Aiko Tanaka' });
    const action = await waitFor(
      () => s.cloud.ofType('staff.action').find((a) => a.body.action === 'remote_unlock' && a.body.result === 'applied'),
      'the staff action uplink',
    );
    expect(action.body).toMatchObject({ code: 'PRIVACY_OVERRIDE', target: 'lock-1', actor: { name: 'Aiko Tanaka' } });
  });

  it('a privacy event naming another lock, or from a lock not paired here, changes nothing', async () => {
    const refusals = () => (s.gw.store.db.prepare('SELECT code FROM lock_refusals').all() as { code: string }[]).map((r) => r.code);
    // lock-1's topic, an event naming lock-2
    await s.lock.publish('event', { eventId: crypto.randomUUID(), lockId: 'lock-2', at: 0, kind: 'privacy', active: true });
    await waitFor(() => refusals().includes('WRONG_LOCK'), 'refused as WRONG_LOCK');
    // a lock this gateway has not paired
    const stranger = new FakeLock(s.f.gatewayId, 'lock-9');
    await stranger.connect(broker.url);
    await stranger.publish('event', { eventId: crypto.randomUUID(), lockId: 'lock-9', at: 0, kind: 'privacy', active: true });
    await waitFor(() => refusals().includes('UNKNOWN_LOCK'), 'refused as UNKNOWN_LOCK');
    await stranger.close();
    expect(lockModesOf(s.gw.store.db, 'lock-1')?.privacySince).toBeNull();
    expect(await pin(STAFF_PIN)).toBe('ALLOWED');
  });

  /** Stops the gateway and starts another on the same file (a restart); the caller stops the one returned. */
  const restartGateway = async (whileAway: () => Promise<void> = async () => {}): Promise<Gateway> => {
    await s.gw.stop({ force: true });
    await whileAway();
    const gw = createGateway(s.f.config, { clock: s.f.clock, log: silentLog(), tickMs: 50 });
    await gw.start();
    await waitFor(() => gw.cloudConnected && gw.siteConnected && gw.timeProven, 'the restarted gateway connected and proven');
    await s.cloud.heartbeat();
    await waitFor(() => (gw.store.settings().leaseExpiresAt ?? 0) > s.f.clock.now(), 'the restarted gateway fresh');
    return gw;
  };

  it('a privacy on turned while the gateway is away reaches it with the lock state: staff keys stay out after its restart', async () => {
    expect(await pin(STAFF_PIN)).toBe('ALLOWED');
    // the event of this goes nowhere (no gateway subscribed, a clean session): the retained state carries it
    const gw = await restartGateway(async () => void (await sim.privacyOn()));
    try {
      await waitFor(() => lockModesOf(gw.store.db, 'lock-1')?.privacySince != null, 'privacy on at the restarted gateway');
      expect(await pin(STAFF_PIN)).toBe('PRIVACY_ACTIVE');
      expect(await pin(PIN)).toBe('ALLOWED');
    } finally {
      await gw.stop({ force: true });
    }
  });

  it('a lock that has not said on this connection whether privacy is on counts as private for staff and one-time keys', async () => {
    await s.cloud.grant({ keyId: asKeyId('key-once'), credential: { type: 'pin', digest: s.f.digest('246810') }, oneTime: true });
    await s.cloud.heartbeat();
    await waitFor(() => s.gw.store.settings().appliedSeq >= 3, 'one-time key applied');
    // the broker forgets the lock's retained state (as a broker restarted without persistence does); nothing re-announces it
    const gw = await restartGateway(() => s.lock.publish('state', '', true));
    try {
      expect(lockModesOf(gw.store.db, 'lock-1')?.privacySince).toBeNull(); // the last value stored says off...
      expect(await pin(STAFF_PIN)).toBe('PRIVACY_ACTIVE'); // ...but nothing says so now
      expect(await pin('246810')).toBe('PRIVACY_ACTIVE');
      expect(await pin(PIN)).toBe('ALLOWED'); // the guest's own key opens
      await sim.privacyOff(); // (already off: the sim says nothing)
      await sim.privacyOn();
      await sim.privacyOff();
      await waitFor(() => lockModesOf(gw.store.db, 'lock-1')?.privacySince === null, 'privacy off, said');
      expect(await pin(STAFF_PIN)).toBe('ALLOWED');
    } finally {
      await gw.stop({ force: true });
    }
  });

  it('privacy keeps one-time keys out as well as staff keys', async () => {
    await s.cloud.grant({ keyId: asKeyId('key-delivery'), credential: { type: 'pin', digest: s.f.digest('135790') }, oneTime: true });
    await s.cloud.heartbeat();
    await waitFor(() => s.gw.store.settings().appliedSeq >= 3, 'one-time key applied');
    await sim.privacyOn();
    await waitFor(() => lockModesOf(s.gw.store.db, 'lock-1')?.privacySince != null, 'privacy on at the gateway');
    expect(await pin('135790')).toBe('PRIVACY_ACTIVE');
    await sim.privacyOff();
    await waitFor(() => lockModesOf(s.gw.store.db, 'lock-1')?.privacySince === null, 'privacy off');
    expect(await pin('135790')).toBe('ALLOWED');
  });

  it('privacy stops passage: a held door is relocked while the guest has privacy on', async () => {
    // the longest passage a schedule may hold (16 h in a row), around the test's noon
    const all: Schedule = { timeZone: 'Asia/Tokyo', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: '06:00', end: '22:00' }] };
    const r = await fetch(`${s.gw.httpUrl}/staff/passage`, {
      method: 'POST',
      headers: { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' },
      body: JSON.stringify({ doorId: 'door-1', schedule: all }),
    });
    expect(r.status).toBe(200);
    await waitFor(() => sim.bolt === 'unlocked', 'held by passage');
    await sim.privacyOn();
    await waitFor(() => sim.bolt === 'locked', 'relocked for privacy');
  });
});
