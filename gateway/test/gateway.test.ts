import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkLockCommand, newId, MAX_MESSAGE_BYTES } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { METRICS_TOKEN, PIN, provision, runSite, STAFF_PIN, STAFF_TOKEN, waitFor, type Running } from './harness.js';
import { T0 } from './fixtures.js';

describe.each(mqttBackends())('gateway against %s', (backend) => {
  let broker: MqttTestBroker;
  let site: Running;
  const start = async (opts: Parameters<typeof runSite>[3] = {}) => {
    site = await runSite(broker.url, broker.url, broker.unique, opts);
    return site;
  };
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    await site?.close();
    await broker.stop();
  });

  /** Grant + heartbeat, and wait until both are applied. */
  describe('when a key is granted and the lease runs', () => {
    it('opens the door with an HMAC command and reports the event attributed to the person', async () => {
      const s = await start();
      const grant = await provision(s);
      const d = await s.lock.present(PIN);
      expect(d).toMatchObject({ allowed: true, code: 'ALLOWED' });
      const cmd = await waitFor(() => s.lock.commands.find((c) => c.commandId === d.commandId), 'unlock command');
      expect(checkLockCommand(s.f.lockSecret, cmd, { lockId: 'lock-1', now: s.f.clock.now(), seen: new Set() })).toEqual({ ok: true });
      expect(cmd.expiresAt - s.f.clock.now()).toBeLessThanOrEqual(30_000);

      const ev = await waitFor(() => s.cloud.ofType('access.event')[0], 'access event uplink');
      expect(ev.body).toMatchObject({
        allowed: true,
        code: 'ALLOWED',
        keyId: 'key-1',
        personId: 'person-1',
        commandId: d.commandId,
        lockId: 'lock-1',
        doorId: 'door-1',
      });
      expect(ev.cid).toBe(grant.cid);
      const ack = await waitFor(() => s.cloud.ofType('ack').find((a) => a.body.ackOf === grant.jti), 'grant ack');
      expect(ack.body).toMatchObject({ result: 'applied', code: 'KEY_ACTIVATED', keyId: 'key-1', keyVersion: 1, ackSeq: 1 });
      // Uplink seq is gap-free.
      await waitFor(() => s.gw.store.outboxDepth() === 0, 'outbox drained');
      const seqs = s.cloud.uplink
        .filter((m) => 'seq' in m)
        .map((m) => (m as { seq: number }).seq)
        .sort((a, b) => a - b);
      expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    });

    it('denies an unknown PIN and locks the lock out after the limit, then lifts after the cool-down', async () => {
      const s = await start();
      await provision(s);
      for (let i = 0; i < 3; i++) expect((await s.lock.present('000000')).code).toBe('UNKNOWN_CREDENTIAL');
      expect((await s.lock.present(PIN)).code).toBe('LOCKED_OUT');
      s.f.clock.advance(60_000);
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      expect(s.gw.store.accessLog(10)).toHaveLength(5);
    });

    it('answers a repeated request id with the recorded decision and no second event', async () => {
      const s = await start();
      await provision(s);
      const first = await s.lock.present(PIN, 'req-repeat');
      s.lock.decisions.clear();
      const again = await s.lock.present(PIN, 'req-repeat');
      expect(again).toEqual(first);
      await waitFor(() => s.gw.store.outboxDepth() === 0, 'drained');
      expect(s.gw.store.accessLog(10)).toHaveLength(1);
    });

    it('answers a malformed request with BAD_REQUEST and records it', async () => {
      const s = await start();
      await s.lock.publish('request', { requestId: 'req-bad', credential: { type: 'pin', value: 'x' } });
      const d = await waitFor(() => s.lock.decisions.get('req-bad'), 'bad request decision');
      expect(d).toMatchObject({ allowed: false, code: 'BAD_REQUEST', commandId: null });
      await s.lock.publish('request', 'not json {');
      await waitFor(() => s.gw.store.accessLog(10).length === 2, 'both recorded');
    });
  });

  describe('when bad downlink arrives', () => {
    it('rejects forged, expired, wrong-audience, unknown-kid, oversize and malformed messages with a code and keeps running', async () => {
      const s = await start();
      const c = s.cloud;
      const grantDraft = (v: number) => ({
        type: 'key.grant',
        seq: 1,
        body: {
          key: {
            keyId: 'key-x',
            version: v,
            personId: 'p',
            credential: { type: 'pin', digest: s.f.digest(PIN) },
            doors: ['door-1'],
            validFrom: 0,
            validUntil: T0 * 2,
            schedule: null,
            offlineCapable: false,
          },
        },
      });
      // forged: signed by a key the gateway does not trust but with the cloud's kid
      const forged = await c.sign(grantDraft(1), { kid: s.f.cloudPair.kid, privateKey: s.f.otherKey.privateKey });
      await c.publishRaw(forged.token);
      await c.publishRaw((await c.sign(grantDraft(2), s.f.otherKey)).token); // unknown kid
      await c.publishRaw((await c.sign({ ...grantDraft(3), aud: 'gw-someone-else' })).token); // wrong audience
      await c.publishRaw((await c.sign(grantDraft(5), undefined, 'not-the-cloud')).token); // wrong issuer
      await c.publishRaw(Buffer.alloc(MAX_MESSAGE_BYTES + 1, 0x61)); // oversize
      await c.publishRaw('this is not a jws');
      await c.publishRaw('eyJhbGciOiJub25lIn0.eyJ9.'); // alg none / garbage
      const expect8 = 8;
      const rejected = await waitFor(
        () =>
          s.gw.store.rejectedCount() >= expect8 - 1
            ? (s.gw.store.db.prepare('SELECT code FROM rejected ORDER BY id').all() as { code: string }[])
            : null,
        'rejections',
      );
      const codes = rejected.map((r) => r.code);
      expect(codes).toEqual(
        expect.arrayContaining(['BAD_SIGNATURE', 'UNKNOWN_KID', 'WRONG_AUDIENCE', 'WRONG_ISSUER', 'TOO_LARGE', 'MALFORMED']),
      );
      expect(s.gw.store.inboxDepth() + s.gw.store.keyCounts().active).toBe(0);
      const metrics = await s.gw.metrics.registry.getSingleMetricAsString('tobira_gateway_downlink_rejected_total');
      expect(metrics).toContain('code="BAD_SIGNATURE"');
      // still running: a good grant works
      await provision(s);
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
    });

    it('rejects an expired message', async () => {
      const s = await start();
      const { token } = await s.cloud.sign({ type: 'heartbeat', body: { lastSeq: 0, intervalMs: 1000 }, ttlSeconds: 1 });
      s.f.clock.advance(120_000);
      await s.cloud.publishRaw(token);
      await waitFor(() => s.gw.store.rejectedCount() === 1, 'rejected');
      expect((s.gw.store.db.prepare('SELECT code FROM rejected').get() as { code: string }).code).toBe('EXPIRED');
      expect(s.gw.store.settings().leaseExpiresAt).toBeNull();
    });
  });

  describe('when grants and revokes arrive out of order or twice', () => {
    it('applies a duplicate grant once', async () => {
      const s = await start();
      const { token } = await s.cloud.sign({
        type: 'key.grant',
        seq: 1,
        body: { key: (await import('./fixtures.js')).grant({ credential: { type: 'pin', digest: s.f.digest(PIN) } }) },
      });
      s.cloud.seq = 1;
      await s.cloud.publishRaw(token);
      await s.cloud.publishRaw(token);
      const hb = await s.cloud.heartbeat();
      await waitFor(() => s.gw.store.settings().leaseExpiresAt !== null, 'lease');
      expect(s.gw.store.inboxByStatus()).toEqual({ processed: 3 }); // the startup resync answer, the grant and the heartbeat
      // The heartbeat's ack follows the grant's in uplink seq order: once it is in, any second grant ack would be too.
      await waitFor(() => s.cloud.ofType('ack').find((a) => a.body.ackOf === hb.jti), 'heartbeat ack');
      expect(s.cloud.ofType('ack').filter((a) => a.body.keyId === 'key-1')).toHaveLength(1);
    });

    it('never lets a key work when its revoke came before its grant', async () => {
      const s = await start();
      await s.cloud.revoke('key-1', 1);
      await provision(s, { version: 1 });
      expect((await s.lock.present(PIN)).allowed).toBe(false);
      const acks = await waitFor(() => (s.cloud.ofType('ack').length >= 3 ? s.cloud.ofType('ack') : null), 'acks');
      expect(acks.find((a) => a.body.ackSeq === 2)?.body).toMatchObject({ result: 'noop', code: 'STALE_VERSION' });
    });

    it('ignores a replayed older grant after a revoke', async () => {
      const s = await start();
      await provision(s, { version: 1 });
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      await s.cloud.revoke('key-1', 2);
      await s.cloud.grant({ version: 1 }); // replayed old grant under a new seq
      await s.cloud.heartbeat();
      await waitFor(() => s.gw.store.settings().appliedSeq === 3, 'applied');
      expect((await s.lock.present(PIN)).code).toBe('KEY_REVOKED');
    });

    it('asks for a resync on a gap and applies in seq order once the gap is filled', async () => {
      const s = await start();
      await s.cloud.grant({}, 2); // seq 1 is missing
      await waitFor(() => s.cloud.ofType('resync.request').find((r) => r.body.reason === 'gap'), 'resync request');
      expect(s.gw.store.settings().appliedSeq).toBe(0);
      await s.cloud.heartbeat(2); // behind: no lease
      await waitFor(() => s.gw.store.inboxByStatus().processed === 1, 'heartbeat processed');
      expect(s.gw.store.settings().leaseExpiresAt).toBeNull();
      await s.cloud.grant(
        { keyId: 'key-0' as never, personId: 'person-0' as never, credential: { type: 'pin', digest: s.f.digest('4444') } },
        1,
      );
      await waitFor(() => s.gw.store.settings().appliedSeq === 2, 'both applied');
      s.cloud.seq = 2;
      await s.cloud.heartbeat();
      await waitFor(() => s.gw.store.settings().leaseExpiresAt !== null, 'lease');
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      expect((await s.lock.present('4444')).code).toBe('ALLOWED');
    });

    it('replaces the key set atomically from a snapshot in parts and acks every key and tombstone', async () => {
      const s = await start();
      await provision(s, { keyId: 'old-key' as never });
      const snapshotId = newId();
      const { grant } = await import('./fixtures.js');
      const k2 = grant({ keyId: 'key-2' as never, version: 4, credential: { type: 'pin', digest: s.f.digest('2222') } });
      const first = await s.cloud.send({
        type: 'keyset.snapshot',
        body: { snapshotId, asOfSeq: 7, part: 1, parts: 2, keys: [k2], revoked: [] },
      });
      await waitFor(() => s.gw.store.inboxByStatus().pending === undefined && s.gw.store.inboxByStatus().processed === 3, 'part 1');
      expect(s.gw.store.settings().appliedSeq).toBe(1); // not applied until all parts arrived
      await s.cloud.send({
        type: 'keyset.snapshot',
        body: { snapshotId, asOfSeq: 7, part: 2, parts: 2, keys: [], revoked: [{ keyId: 'old-key', version: 2 }] },
      });
      await waitFor(() => s.gw.store.settings().appliedSeq === 7, 'snapshot applied');
      s.cloud.seq = 7;
      await s.cloud.heartbeat();
      await waitFor(() => s.gw.store.settings().leaseExpiresAt! > T0, 'lease');
      expect((await s.lock.present('2222')).code).toBe('ALLOWED');
      expect((await s.lock.present(PIN)).code).toBe('KEY_REVOKED');
      const acks = await waitFor(
        () =>
          s.cloud.ofType('ack').filter((a) => a.body.ackOf === first.jti).length === 3
            ? s.cloud.ofType('ack').filter((a) => a.body.ackOf === first.jti)
            : null,
        'snapshot acks',
      );
      // each key and tombstone, then the snapshot as a whole (the cloud settles what it covered)
      expect(acks.map((a) => [a.body.keyId, a.body.result, a.body.code, a.body.ackSeq])).toEqual([
        ['old-key', 'applied', 'KEY_REVOKE_CONFIRMED', null],
        ['key-2', 'applied', 'KEY_ACTIVATED', null],
        [null, 'applied', 'SNAPSHOT_APPLIED', null],
      ]);
    });

    it('retries a failing apply, then marks it failed, visible, and acks it refused', async () => {
      let failures = 0;
      const s = await start({
        deps: {
          beforeApply: (row) => {
            if (row.type === 'key.grant') {
              failures++;
              throw new Error('disk on fire');
            }
          },
        },
      });
      const g = await s.cloud.grant();
      await waitFor(() => s.gw.store.inboxByStatus().failed === 1, 'failed row');
      expect(failures).toBe(3);
      expect(s.gw.store.db.prepare('SELECT attempts, last_error, code FROM inbox WHERE jti = ?').get(g.jti)).toEqual({
        attempts: 3,
        last_error: 'disk on fire',
        code: 'APPLY_FAILED',
      });
      await waitFor(
        () => s.cloud.ofType('ack').find((a) => a.body.ackOf === g.jti && a.body.result === 'refused' && a.body.code === 'APPLY_FAILED'),
        'refused ack',
      );
      expect(s.gw.store.settings().appliedSeq).toBe(1); // a failed grant does not block the chain
    });
  });

  describe('when the lease runs out (fail closed)', () => {
    it('denies with CLOUD_STALE without a heartbeat (staff keys too: no proven-fresh sync to count from), and after the lease every key but offline-capable staff keys', async () => {
      const s = await start();
      await s.cloud.grant();
      await s.cloud.grant({
        keyId: 'staff' as never,
        personId: 'staff-1' as never,
        offlineCapable: true,
        credential: { type: 'pin', digest: s.f.digest(STAFF_PIN) },
      });
      await waitFor(() => s.gw.store.settings().appliedSeq === 2, 'applied');
      expect((await s.lock.present(PIN)).code).toBe('CLOUD_STALE');
      expect((await s.lock.present(STAFF_PIN)).code).toBe('CLOUD_STALE');
      await s.cloud.heartbeat();
      await waitFor(() => s.gw.store.settings().leaseExpiresAt !== null, 'lease');
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      s.f.clock.advance(300_000);
      expect((await s.lock.present(PIN)).code).toBe('CLOUD_STALE');
      expect((await s.lock.present(STAFF_PIN)).code).toBe('ALLOWED');
    });

    it('an offline-capable key opens on a stale lease only until its offline cap after the last fresh heartbeat; a new fresh heartbeat restarts the count', async () => {
      const s = await start();
      await provision(s, {
        keyId: 'staff' as never,
        personId: 'staff-1' as never,
        offlineCapable: true,
        offlineMaxSeconds: 3600,
        validUntil: T0 + 30 * 86_400_000,
        credential: { type: 'pin', digest: s.f.digest(STAFF_PIN) },
      });
      const lastFresh = s.gw.store.settings().leaseExpiresAt! - 300_000;
      s.f.clock.set(lastFresh + 3_599_000);
      expect((await s.lock.present(STAFF_PIN)).code).toBe('ALLOWED');
      s.f.clock.set(lastFresh + 3_600_000);
      expect((await s.lock.present(STAFF_PIN)).code).toBe('CLOUD_STALE');
      s.f.clock.advance(7 * 86_400_000);
      expect((await s.lock.present(STAFF_PIN)).code).toBe('CLOUD_STALE');
      await s.cloud.heartbeat();
      await waitFor(() => s.gw.store.settings().leaseExpiresAt! > s.f.clock.now(), 'lease renewed');
      s.f.clock.advance(600_000);
      expect((await s.lock.present(STAFF_PIN)).code).toBe('ALLOWED');
    });

    it('never lets an expired key work again when the clock is set backwards', async () => {
      const s = await start();
      await provision(s, { validUntil: T0 + 60_000 });
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      s.f.clock.advance(61_000);
      expect((await s.lock.present(PIN)).code).toBe('KEY_EXPIRED');
      s.f.clock.set(T0 - 3_600_000); // clock reset an hour back
      expect((await s.lock.present(PIN)).code).toBe('KEY_EXPIRED');
      const rows = s.gw.store.accessLog(1);
      expect(rows[0]!.at).toBeGreaterThanOrEqual(T0 + 61_000);
    });
  });

  describe('when staff use the local HTTP surface', () => {
    it('sets lockdown with the staff token only, and exposes health and metrics', async () => {
      const s = await start({ overrides: { metricsToken: METRICS_TOKEN } });
      await provision(s);
      await provision(s, {
        keyId: 'staff' as never,
        personId: 'staff-1' as never,
        offlineCapable: true,
        credential: { type: 'pin', digest: s.f.digest(STAFF_PIN) },
      });
      const url = s.gw.httpUrl!;
      const post = (auth: string | null, body: unknown) =>
        fetch(`${url}/staff/mode`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(auth ? { authorization: auth } : {}) },
          body: JSON.stringify(body),
        });
      expect((await post(null, { mode: 'lockdown' })).status).toBe(401);
      expect((await post('Bearer wrong-token-wrong-token', { mode: 'lockdown' })).status).toBe(401);
      expect((await post(`Bearer ${STAFF_TOKEN}`, { mode: 'panic' })).status).toBe(422);
      expect((await post(`Bearer ${STAFF_TOKEN}`, { mode: 'lockdown' })).status).toBe(200);
      expect((await s.lock.present(PIN)).code).toBe('SITE_LOCKDOWN');
      expect((await s.lock.present(STAFF_PIN)).code).toBe('ALLOWED');
      await waitFor(() => s.cloud.ofType('gateway.status').find((m) => m.body.mode === 'lockdown'), 'status up');

      const health = await (await fetch(`${url}/healthz`)).json();
      expect(health).toMatchObject({ ok: true, cloudConnected: true, mode: 'lockdown', appliedSeq: 2 });
      const metrics = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).text();
      for (const name of [
        'tobira_gateway_decisions_total{code="SITE_LOCKDOWN"} 1',
        'tobira_gateway_inbox_depth',
        'tobira_gateway_outbox_depth',
        'tobira_gateway_lease_remaining_seconds 300',
        'tobira_gateway_lock_online{lock="lock-1"}',
      ]) {
        expect(metrics).toContain(name);
      }
    });
  });

  describe('when locks report', () => {
    it('records availability and state, and sends alarms up once', async () => {
      const s = await start();
      await s.lock.publish('presence', { online: true }, true);
      await s.lock.publish('state', { lockId: 'lock-1', bolt: 'locked', door: 'closed', battery: 80, at: T0, lastCommandId: null }, true);
      await waitFor(() => s.gw.store.lock('lock-1')?.battery === 80 && s.gw.store.lock('lock-1')?.online, 'state');
      const alarm = { eventId: newId(), lockId: 'lock-1', at: T0, kind: 'forced_open' };
      await s.lock.publish('event', alarm);
      await s.lock.publish('event', alarm); // redelivered
      const up = await waitFor(() => s.cloud.ofType('alarm')[0], 'alarm up');
      expect(up.body).toMatchObject({ alarmId: alarm.eventId, kind: 'forced_open', lockId: 'lock-1', doorId: 'door-1' });
      await s.lock.publish('presence', { online: false }, true);
      await waitFor(() => s.gw.store.lock('lock-1')?.online === false, 'offline');
      expect(s.gw.store.db.prepare("SELECT count(*) AS n FROM outbox WHERE type = 'alarm'").get()).toEqual({ n: 1 });
      await s.lock.publish('presence', '', true); // clear retained
    });
  });
});
