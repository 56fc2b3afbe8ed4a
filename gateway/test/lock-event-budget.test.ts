import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeSecret, newPairingSecret } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { FakeLock, PIN, lockClockOf, STAFF_TOKEN, provision, runSite, waitFor, type Running } from './harness.js';
import { capturingLog } from './staff-helpers.js';

/**
 * A compromised lock has valid broker credentials for its own topics and
 * floods the gateway with alarms, states and presence (docs/gateway.md "Lock
 * event budget"): the gateway keeps a per-lock budget, coalesces repeated
 * alarms, raises one LOCK_EVENTS_THROTTLED alarm per episode, and still
 * answers the other locks' door requests.
 */
describe.each(mqttBackends())('lock event budget against %s', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;
  const extra: FakeLock[] = [];
  let cap: ReturnType<typeof capturingLog>;
  const locks = ['lock-1', 'lock-2'].map((lockId, i) => ({
    lockId,
    doorId: `door-${i + 1}`,
    pairingSecret: encodeSecret(newPairingSecret()),
  }));
  const BURST = 20;

  beforeEach(async () => {
    broker = await startMqttBackend(backend);
    cap = capturingLog();
  });
  afterEach(async () => {
    for (const l of extra.splice(0)) await l.close();
    await site?.close();
    site = undefined;
    await broker.stop();
  });

  const count = (s: Running, sql: string, ...args: unknown[]) => (s.gw.store.db.prepare(sql).get(...args) as { n: number }).n;
  const alarmUplinks = (s: Running, lockId: string) =>
    s.cloud.uplink.filter((m) => m.type === 'alarm' && m.body.lockId === lockId).map((m) => (m.type === 'alarm' ? m.body.kind : null));
  const staffAlarms = async (s: Running, lockId: string) => {
    const r = await fetch(`${s.gw.httpUrl!}/staff/alarms?status=open&lock=${lockId}`, {
      headers: { authorization: `Bearer ${STAFF_TOKEN}` },
    });
    expect(r.status).toBe(200);
    return ((await r.json()) as { items: Record<string, unknown>[] }).items;
  };

  it('stores, uplinks and logs a bounded amount for thousands of alarms and states, raises LOCK_EVENTS_THROTTLED once, and still decides the other lock’s door', async () => {
    const s = (site = await runSite(broker.url, broker.url, broker.unique, {
      overrides: { locks, lockEventRate: { burst: BURST, perSecond: 1 } },
      deps: { log: cap.log },
    }));
    await provision(s, { doors: ['door-1', 'door-2'] as never });
    const genuine = new FakeLock(s.f.gatewayId, 'lock-2', lockClockOf(s.gw));
    await genuine.connect(broker.url);
    extra.push(genuine);

    const refused = async () =>
      (await s.gw.metrics.registry.getSingleMetricAsString('tobira_gateway_lock_messages_refused_total'))
        .split('\n')
        .filter((l) => l.includes('code="LOCK_EVENTS_THROTTLED"'))
        .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);

    // The flood: 2,000 alarms of two kinds (each with a fresh event id, as a lock's are) and 1,000 states.
    // The manual clock stands still, so no token comes back during it. It goes in rounds the gateway has
    // handled before the next: a broker drops what it queues for a slow subscriber beyond its limit
    // (Mosquitto's default 1,000), and a drop there would not be the budget's refusal this test counts.
    const kinds = ['door_ajar', 'tamper'] as const;
    const ROUND = 500;
    for (let sent = 0; sent < 3000;) {
      const round: Promise<void>[] = [];
      for (const end = sent + ROUND; sent < end; sent++) {
        const i = sent;
        round.push(
          i % 3 === 2
            ? s.lock.publish('state', { lockId: 'lock-1', bolt: 'locked', door: 'closed', battery: 80, at: 1000 + i, lastCommandId: null })
            : s.lock.publish('event', { eventId: randomUUID(), lockId: 'lock-1', at: 1000 + i, kind: kinds[i % 2] }),
        );
      }
      await Promise.all(round);
      // the lock's privacy report on connect is one more message of the budget
      await waitFor(async () => (await refused()) >= sent + 1 - BURST, `flood round up to ${sent} handled`);
    }

    const d = await genuine.present(PIN);
    expect(d).toMatchObject({ allowed: true, code: 'ALLOWED' });
    await waitFor(() => genuine.commands.find((c) => c.commandId === d.commandId), 'the unlock command of the genuine lock');
    // The other lock's own alarms are not held back by lock-1's flood.
    await genuine.publish('event', { eventId: randomUUID(), lockId: 'lock-2', at: 5, kind: 'forced_open' });
    await waitFor(() => count(s, "SELECT count(*) AS n FROM alarms WHERE lock_id = 'lock-2'") === 1, 'lock-2 alarm recorded');

    // Bounded rows: one open alarm per kind (coalesced, with a count) and one LOCK_EVENTS_THROTTLED.
    const rows = s.gw.store.db.prepare("SELECT kind, count, closed_at FROM alarms WHERE lock_id = 'lock-1' ORDER BY kind").all() as {
      kind: string;
      count: number;
      closed_at: number | null;
    }[];
    expect(rows.map((r) => r.kind)).toEqual(['door_ajar', 'lock_events_throttled', 'tamper']);
    expect(rows.every((r) => r.closed_at === null)).toBe(true);
    expect(rows.find((r) => r.kind === 'lock_events_throttled')!.count).toBe(1);
    // The budget let BURST messages through (the lock's privacy report on connect among them), no more.
    const passedAlarms = rows.filter((r) => r.kind !== 'lock_events_throttled').reduce((n, r) => n + r.count, 0);
    expect(passedAlarms).toBeGreaterThan(1);
    expect(passedAlarms).toBeLessThan(BURST);
    expect(await refused()).toBe(3001 - BURST);
    // One refusal row and one log line for the episode, not one per message.
    expect(count(s, "SELECT count(*) AS n FROM lock_refusals WHERE lock_id = 'lock-1'")).toBe(1);
    expect(cap.lines().filter((l) => l.code === 'LOCK_EVENTS_THROTTLED' && l.lockId === 'lock-1')).toHaveLength(1);

    // The cloud hears a bounded number: the first alarm of each kind and the throttling.
    await waitFor(() => alarmUplinks(s, 'lock-1').includes('lock_events_throttled'), 'LOCK_EVENTS_THROTTLED uplinked');
    expect(alarmUplinks(s, 'lock-1').sort()).toEqual(['door_ajar', 'lock_events_throttled', 'tamper']);

    // Staff see it with its counts and first/last seen.
    const open = await staffAlarms(s, 'lock-1');
    expect(open).toHaveLength(3);
    const throttled = open.find((a) => a.kind === 'lock_events_throttled')!;
    expect(throttled).toMatchObject({ lockId: 'lock-1', doorId: 'door-1', status: 'open', count: 1, endedAt: null });
    const ajar = open.find((a) => a.kind === 'door_ajar')!;
    expect(ajar).toMatchObject({ count: expect.any(Number), firstSeenAt: expect.any(Number), lastSeenAt: expect.any(Number) });

    // Back under budget (the bucket full again): the episode ends, once, and the lock is heard again.
    s.f.clock.advance((BURST + 5) * 1000);
    const jam = randomUUID();
    await s.lock.publish('event', { eventId: jam, lockId: 'lock-1', at: 9000, kind: 'jam' });
    await waitFor(() => count(s, 'SELECT count(*) AS n FROM alarms WHERE alarm_id = ?', jam) === 1, 'the jam alarm after the flood');
    const after = await staffAlarms(s, 'lock-1');
    expect(after.find((a) => a.kind === 'lock_events_throttled')).toMatchObject({ count: 1, endedAt: expect.any(Number) });
    expect(cap.lines().filter((l) => l.msg === 'lock event flood over: messages dropped by the lock event budget')).toEqual([
      expect.objectContaining({ lockId: 'lock-1', dropped: 3001 - BURST, code: 'LOCK_EVENTS_THROTTLED' }),
    ]);

    // A second flood while the alarm is still open is the same alarm, counted again (one open alarm per lock and kind).
    await Promise.all(
      Array.from({ length: 2 * BURST }, () => s.lock.publish('event', { eventId: randomUUID(), lockId: 'lock-1', at: 9001, kind: 'jam' })),
    );
    expect((await genuine.present(PIN)).code).toBe('ALLOWED');
    const again = await staffAlarms(s, 'lock-1');
    expect(again.filter((a) => a.kind === 'lock_events_throttled')).toEqual([expect.objectContaining({ count: 2, endedAt: null })]);
    expect(again.filter((a) => a.kind === 'jam')).toHaveLength(1);
  });

  it('over the budget privacy turning on still counts (fail closed), privacy turning off does not', async () => {
    const s = (site = await runSite(broker.url, broker.url, broker.unique, {
      overrides: { locks, lockEventRate: { burst: 3, perSecond: 1 } },
      deps: { log: cap.log },
    }));
    const privacySince = () =>
      (s.gw.store.db.prepare("SELECT privacy_since AS p FROM locks WHERE lock_id = 'lock-1'").get() as { p: number | null }).p;
    // the lock's privacy report on connect took one token; two states take the rest, the third is dropped
    for (let i = 0; i < 3; i++)
      await s.lock.publish('state', { lockId: 'lock-1', bolt: 'locked', door: 'closed', battery: 80, at: 100 + i, lastCommandId: null });
    await waitFor(
      async () =>
        (await s.gw.metrics.registry.getSingleMetricAsString('tobira_gateway_lock_messages_refused_total')).includes(
          'LOCK_EVENTS_THROTTLED',
        ),
      'the lock over its budget',
    );
    expect(privacySince()).toBeNull();
    await s.lock.announcePrivacy(true);
    await waitFor(() => privacySince() !== null, 'privacy on, over the budget');
    await s.lock.announcePrivacy(false);
    await s.lock.publish('state', {
      lockId: 'lock-1',
      bolt: 'locked',
      door: 'closed',
      battery: 80,
      at: 200,
      lastCommandId: null,
      privacy: false,
    });
    // the next request is answered only after both were handled (one broker connection, in order)
    await s.lock.present(PIN);
    expect(privacySince()).not.toBeNull();
  });

  it('acknowledging a coalesced alarm closes it: the next alarm of that kind opens a new one, sent up again', async () => {
    const s = (site = await runSite(broker.url, broker.url, broker.unique, { overrides: { locks }, deps: { log: cap.log } }));
    await provision(s, { doors: ['door-1'] as never });
    const first = randomUUID();
    await s.lock.publish('event', { eventId: first, lockId: 'lock-1', at: 1, kind: 'door_ajar' });
    await s.lock.publish('event', { eventId: randomUUID(), lockId: 'lock-1', at: 2, kind: 'door_ajar' });
    // a redelivered alarm (same event id) is not counted again
    await s.lock.publish('event', { eventId: first, lockId: 'lock-1', at: 1, kind: 'door_ajar' });
    await waitFor(async () => (await staffAlarms(s, 'lock-1'))[0]?.count === 2, 'two door_ajar alarms coalesced');
    await waitFor(() => alarmUplinks(s, 'lock-1').length === 1, 'one alarm sent up');

    const ack = await fetch(`${s.gw.httpUrl!}/staff/alarms/${first}/ack`, {
      method: 'POST',
      headers: { authorization: `Bearer ${STAFF_TOKEN}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(ack.status).toBe(200);
    await s.lock.publish('event', { eventId: randomUUID(), lockId: 'lock-1', at: 3, kind: 'door_ajar' });
    await waitFor(async () => (await staffAlarms(s, 'lock-1')).length === 1, 'a new open door_ajar alarm');
    expect((await staffAlarms(s, 'lock-1'))[0]).toMatchObject({ count: 1, kind: 'door_ajar' });
    await waitFor(() => alarmUplinks(s, 'lock-1').length === 2, 'the new alarm sent up');
    expect(alarmUplinks(s, 'lock-1')).toEqual(['door_ajar', 'door_ajar']);
  });
});
