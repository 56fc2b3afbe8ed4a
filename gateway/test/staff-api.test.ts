import {
  ReplayWindow,
  checkLockCommand,
  connectMqtt,
  newId,
  newPairingSecret,
  topics,
  waitConnected,
  type LockCommand,
} from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { T0 } from './fixtures.js';
import { FakeLock, METRICS_TOKEN, PIN, provision, runSite, STAFF_TOKEN, waitFor, type Running } from './harness.js';

type Json = Record<string, unknown>;

describe.each(mqttBackends())('staff read API of a running gateway against %s', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;
  const extra: { close(): Promise<void> }[] = [];
  const start = async (opts: Parameters<typeof runSite>[3] = {}) => {
    site = await runSite(broker.url, broker.url, broker.unique, opts);
    return site;
  };
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    for (const c of extra.splice(0)) await c.close();
    await site?.close();
    site = undefined;
    await broker.stop();
  });

  const staffGet = async (s: Running, path: string, token: string | null = STAFF_TOKEN) => {
    const r = await fetch(`${s.gw.httpUrl!}${path}`, { headers: token === null ? {} : { authorization: `Bearer ${token}` } });
    return { status: r.status, body: (await r.json()) as Json, cid: r.headers.get('x-correlation-id') };
  };
  const items = async (s: Running, path: string): Promise<Json[]> => {
    const r = await staffGet(s, path);
    expect(r.status, `${path}: ${JSON.stringify(r.body)}`).toBe(200);
    return r.body.items as Json[];
  };

  describe('when no staff token is configured', () => {
    it('refuses every staff read with 503 over real HTTP and still serves health (no token needed)', async () => {
      const s = await start({ overrides: { staffToken: undefined } as never });
      for (const path of [
        '/staff/status',
        '/staff/locks',
        '/staff/access-events',
        '/staff/alarms',
        '/staff/inbox/failed',
        '/staff/rejected',
        '/staff/lock-refusals',
      ]) {
        const r = await staffGet(s, path, 'anything-at-all-0123456789');
        expect(r.status, path).toBe(503);
        expect(r.body).toEqual({ code: 'STAFF_AUTH_NOT_CONFIGURED' });
      }
      // no lease yet: health answers (503, failing closed), it is not refused for the missing token
      const health = await fetch(`${s.gw.httpUrl!}/healthz`);
      expect(health.status).toBe(503);
      expect(await health.json()).toMatchObject({ status: 'failing_closed', reasons: ['NO_LEASE'] });
    });
  });

  describe('when the site has seen traffic', () => {
    it('reports status: fail-closed without a lease, open with one, LEASE_EXPIRED after it, with the counts the database holds', async () => {
      const s = await start();
      let st = (await staffGet(s, '/staff/status')).body;
      expect(st).toMatchObject({
        gatewayId: s.f.gatewayId,
        mode: 'normal',
        cloudConnected: true,
        siteConnected: true,
        appliedSeq: 0,
        leaseExpiresAt: null,
        failClosed: true,
        failClosedReason: 'NO_LEASE',
        timeZone: null,
      });

      await provision(s);
      st = (await staffGet(s, '/staff/status')).body;
      expect(st).toMatchObject({
        appliedSeq: 1,
        leaseExpiresAt: T0 + 300_000,
        leaseRemainingSeconds: 300,
        failClosed: false,
        failClosedReason: null,
        waitingOnGap: false,
        inboxFailed: 0,
        rejectedDownlinks: 0,
        openAlarms: 0,
        locksTotal: 1,
      });

      // a gap: seq 3 arrives without seq 2
      await s.cloud.grant({ keyId: 'key-3' as never }, 3);
      await waitFor(() => s.gw.store.inboxDepth() === 1, 'gapped row stored');
      await s.cloud.publishRaw('not a jws');
      await waitFor(() => s.gw.store.rejectedCount() === 1, 'rejected');
      await s.lock.publish('event', { eventId: newId(), lockId: 'lock-1', at: T0, kind: 'tamper' });
      await waitFor(() => s.gw.store.db.prepare('SELECT 1 FROM alarms').get(), 'alarm');
      // the uplink drains in the background: read the depth once it has settled
      await waitFor(() => s.gw.store.outboxDepth() === 0, 'outbox drained');
      s.f.clock.advance(300_000);
      st = (await staffGet(s, '/staff/status')).body;
      expect(st).toMatchObject({
        failClosed: true,
        failClosedReason: 'LEASE_EXPIRED',
        leaseRemainingSeconds: 0,
        waitingOnGap: true,
        inboxDepth: 1,
        outboxDepth: 0,
        rejectedDownlinks: 1,
        openAlarms: 1,
      });
    });

    it("reports the site's time zone from the config (null when none is configured, above)", async () => {
      const s = await start({ overrides: { timeZone: 'Asia/Tokyo' } });
      const r = await staffGet(s, '/staff/status');
      expect(r.status).toBe(200);
      expect(r.body.timeZone).toBe('Asia/Tokyo');
    });

    it('lists decisions, alarms, locks, failed inbox rows and rejected downlinks as the database holds them after real traffic', async () => {
      const s = await start({
        deps: {
          beforeApply: (row) => {
            if (row.type === 'key.revoke') throw new Error('disk on fire');
          },
        },
      });
      await provision(s);
      await s.lock.publish('presence', { online: true }, true);
      await s.lock.publish('state', { lockId: 'lock-1', bolt: 'locked', door: 'closed', battery: 64, at: T0, lastCommandId: null }, true);
      await waitFor(() => s.gw.store.lock('lock-1')?.online && s.gw.store.lock('lock-1')?.battery === 64, 'lock state');
      const ok = await s.lock.present(PIN);
      const bad = await s.lock.present('000000');
      const alarmId = newId();
      await s.lock.publish('event', { eventId: alarmId, lockId: 'lock-1', at: T0, kind: 'forced_open' });
      await waitFor(() => s.gw.store.db.prepare('SELECT 1 FROM alarms WHERE alarm_id = ?').get(alarmId), 'alarm stored');
      const revoke = await s.cloud.revoke('key-1', 2);
      await waitFor(() => s.gw.store.inboxByStatus().failed === 1, 'failed revoke');
      // forged: the cloud's kid, another key
      const forged = await s.cloud.sign(
        { type: 'heartbeat', body: { lastSeq: 0, intervalMs: 1000 } },
        { kid: s.f.cloudPair.kid, privateKey: s.f.otherKey.privateKey },
      );
      await s.cloud.publishRaw(forged.token);
      await waitFor(() => s.gw.store.rejectedCount() === 1, 'rejected');

      const events = await items(s, '/staff/access-events');
      expect(events.map((e) => [e.requestId, e.allowed, e.code])).toEqual([
        [bad.requestId, false, 'UNKNOWN_CREDENTIAL'],
        [ok.requestId, true, 'ALLOWED'],
      ]);
      expect(events[1]).toMatchObject({
        lockId: 'lock-1',
        doorId: 'door-1',
        keyId: 'key-1',
        personId: 'person-1',
        credentialType: 'pin',
        commandId: ok.commandId,
      });
      const everything = JSON.stringify(events);
      expect(everything).not.toContain(PIN);
      expect(everything).not.toContain('000000');
      expect(everything).not.toContain(s.f.digest(PIN));
      expect((await items(s, '/staff/access-events?allowed=true')).map((e) => e.requestId)).toEqual([ok.requestId]);
      expect((await items(s, '/staff/access-events?code=UNKNOWN_CREDENTIAL&door=door-1')).map((e) => e.requestId)).toEqual([bad.requestId]);

      expect(await items(s, '/staff/locks')).toEqual([
        {
          lockId: 'lock-1',
          doorId: 'door-1',
          doorName: null,
          online: true,
          state: { bolt: 'locked', door: 'closed', battery: 64, at: T0 },
          lockout: { failures: 1, lockedOutUntil: null, lockedOut: false },
          openAlarms: 1,
          updatedAt: expect.any(Number),
        },
      ]);
      expect(await items(s, '/staff/alarms?status=open')).toEqual([
        expect.objectContaining({ alarmId, lockId: 'lock-1', doorId: 'door-1', kind: 'forced_open', status: 'open', at: T0 }),
      ]);

      const failed = await items(s, '/staff/inbox/failed');
      expect(failed).toEqual([
        {
          jti: revoke.jti,
          type: 'key.revoke',
          seq: 2,
          keyId: 'key-1',
          keyVersion: 2,
          attempts: 3,
          code: 'APPLY_FAILED',
          lastError: 'disk on fire',
          receivedAt: expect.any(Number),
          failedAt: expect.any(Number),
          cid: revoke.cid,
        },
      ]);
      const st = (await staffGet(s, '/staff/status')).body;
      expect(st).toMatchObject({ inboxFailed: 1, rejectedDownlinks: 1, openAlarms: 1, appliedSeq: 1, locksOnline: 1 });

      const rejected = await items(s, '/staff/rejected');
      expect(rejected).toEqual([
        {
          id: expect.any(Number),
          at: expect.any(Number),
          topic: topics.gatewayDown(s.f.gatewayId),
          code: 'BAD_SIGNATURE',
          detail: expect.any(String),
          bytes: forged.token.length,
          // what the forged message claims, unverified (gateway/test/rejected-downlinks.test.ts covers these)
          claimedJti: forged.message.jti,
          claimedCid: forged.message.cid,
          claimedType: 'heartbeat',
          claimedSeq: null,
          claimedIssuer: 'tobira-cloud',
        },
      ]);
      expect(await items(s, '/staff/rejected?code=EXPIRED')).toEqual([]);
    });
  });

  describe('when locks send what the gateway refuses, or refuse its commands', () => {
    it('stores each refusal with the claimed lock, topic, code and detail (never a credential), and the locks refusals of bad-MAC and replayed commands', async () => {
      const s = await start({ overrides: { metricsToken: METRICS_TOKEN } });
      await provision(s);
      const gw = s.f.gatewayId;
      const raw = connectMqtt(broker.url, { protocolVersion: 4, clientId: `raw-${gw}`, clean: true });
      extra.push({ close: () => raw.endAsync(true) });
      await waitConnected(raw);
      const stranger = new FakeLock(gw, 'lock-9');
      await stranger.connect(broker.url);
      extra.push(stranger);

      await s.lock.publish('state', '{"lockId": "lock-1", ');
      await s.lock.publish('state', { lockId: 'lock-2', bolt: 'locked', door: 'closed', battery: 50, at: T0, lastCommandId: null });
      await s.lock.publish('presence', { online: 'yes' });
      await s.lock.publish('request', { requestId: 'req-short-pin', credential: { type: 'pin', value: '987' }, at: s.gw.trustedNow() });
      await waitFor(() => s.lock.decisions.get('req-short-pin'), 'BAD_REQUEST decision');
      await stranger.publish('presence', { online: true });
      await stranger.publish('request', { requestId: 'req-stranger', credential: { type: 'pin', value: PIN }, at: s.gw.trustedNow() });
      await raw.publishAsync(`tobira/v1/site/${gw}/lock/bad.lock/event`, '{}', { qos: 1 });

      // The lock side of the HMAC: a lock checks the gateway's real command with lock-auth, as firmware does.
      const window = new ReplayWindow();
      const report = async (cmd: LockCommand, secret: Uint8Array) => {
        const c = checkLockCommand(secret, cmd, { lockId: 'lock-1', now: s.f.clock.now(), seen: window });
        if (c.ok) window.remember(cmd.commandId, cmd.expiresAt, s.f.clock.now());
        await s.lock.publish('event', {
          eventId: newId(),
          lockId: 'lock-1',
          at: s.f.clock.now(),
          kind: 'command_result',
          commandId: cmd.commandId,
          result: c.ok ? 'executed' : 'refused',
          code: c.ok ? null : c.code,
        });
        return c;
      };
      const first = await s.lock.present(PIN, 'req-twice');
      const cmd = await waitFor(() => s.lock.commands.find((c) => c.commandId === first.commandId), 'command');
      expect(await report(cmd, s.f.lockSecret)).toEqual({ ok: true });
      expect(await report(cmd, newPairingSecret())).toEqual({ ok: false, code: 'BAD_MAC' });
      s.lock.decisions.clear();
      const n = s.lock.commands.length;
      await s.lock.present(PIN, 'req-twice'); // the lock retries: the gateway answers the recorded command again
      const again = await waitFor(() => s.lock.commands[n], 'command again');
      expect(again).toEqual(cmd);
      expect(await report(again, s.f.lockSecret)).toEqual({ ok: false, code: 'COMMAND_REPLAYED' });

      await waitFor(
        () => (s.gw.store.db.prepare('SELECT count(*) AS n FROM lock_refusals').get() as { n: number }).n >= 9,
        'refusals recorded',
      );
      const all = await items(s, '/staff/lock-refusals?limit=500');
      // newest first; messages of different publishers may reach the gateway in either order, so compare as a set
      const ids = all.map((r) => r.id as number);
      expect(ids).toEqual([...ids].sort((a, b) => b - a));
      const key = (r: unknown[]) => JSON.stringify(r);
      const seen = all.map((r) => [r.origin, r.lockId, r.channel, r.code]).sort((a, b) => key(a).localeCompare(key(b)));
      expect(seen).toEqual(
        [
          ['lock', 'lock-1', 'event', 'COMMAND_REPLAYED'],
          ['lock', 'lock-1', 'event', 'BAD_MAC'],
          ['gateway', null, 'event', 'BAD_TOPIC'],
          ['gateway', 'lock-9', 'request', 'UNKNOWN_LOCK'],
          ['gateway', 'lock-9', 'presence', 'UNKNOWN_LOCK'],
          // a lock says on connect whether privacy is on (an event): the stranger's is refused too
          ['gateway', 'lock-9', 'event', 'UNKNOWN_LOCK'],
          ['gateway', 'lock-1', 'request', 'SCHEMA_INVALID'],
          ['gateway', 'lock-1', 'presence', 'SCHEMA_INVALID'],
          ['gateway', 'lock-1', 'state', 'WRONG_LOCK'],
          ['gateway', 'lock-1', 'state', 'MALFORMED'],
        ].sort((a, b) => key(a).localeCompare(key(b))),
      );
      expect(all.find((r) => r.code === 'BAD_TOPIC')).toMatchObject({ topic: `tobira/v1/site/${gw}/lock/bad.lock/event`, bytes: 2 });
      expect(all.find((r) => r.code === 'UNKNOWN_LOCK' && r.channel === 'request')).toMatchObject({
        topic: topics.lock(gw, 'lock-9', 'request'),
      });
      expect(all.find((r) => r.code === 'BAD_MAC')?.detail).toContain(cmd.commandId);
      const shortPin = all.find((r) => r.channel === 'request' && r.code === 'SCHEMA_INVALID')!;
      expect(shortPin.detail).toContain('credential');
      // nothing stored helps guess a PIN: neither the short PIN nor the valid one the stranger sent
      const stored = JSON.stringify(all) + JSON.stringify(s.gw.store.db.prepare('SELECT * FROM lock_refusals').all());
      // (as a value: a random UUID in the rows may hold the digits 987 by chance; stored text holds a PIN only as a string)
      expect(stored).not.toMatch(/["'=:(\s]987["'\\\s,;.)}\]]/);
      expect(stored).not.toMatch(new RegExp(`["'=:(\\s]${PIN}["'\\\\\\s,;.)}\\]]`));

      // filters, and the counter the metrics already had
      expect((await items(s, '/staff/lock-refusals?origin=lock')).map((r) => r.code)).toEqual(['COMMAND_REPLAYED', 'BAD_MAC']);
      expect((await items(s, '/staff/lock-refusals?lock=lock-9')).map((r) => r.channel).sort()).toEqual(['event', 'presence', 'request']);
      expect((await items(s, '/staff/lock-refusals?code=SCHEMA_INVALID&lock=lock-1')).map((r) => r.channel)).toEqual([
        'request',
        'presence',
      ]);
      const metrics = await (await fetch(`${s.gw.httpUrl!}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).text();
      expect(metrics).toContain('tobira_gateway_lock_messages_refused_total{channel="request",code="UNKNOWN_LOCK"} 1');
      expect((await staffGet(s, '/staff/status')).body.lockRefusals).toBe(10);
    });
  });
});
