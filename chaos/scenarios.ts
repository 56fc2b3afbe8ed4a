import Database from 'better-sqlite3';
import type { Cluster, GatewayNode } from './cluster.js';
import { backupGateway, holdOutbox, releaseHeld, releaseOutbox, restoreGateway, setPrivacy } from './faults.js';
import type { Entry, History } from './history.js';
import type { Key, Workload } from './workload.js';

/**
 * Targeted scenarios (`npm run chaos -- --scenario <name>`, and each `--prove-bugs` patch's run):
 * instead of the random injector, a script that forces the conditions one known bug needs, so a
 * proof does not depend on random faults lining up or on how slow the machine is. The workload
 * keeps running alongside; the scenario also presents its chosen key every 300 ms through the fault,
 * so a door that should stay shut is tried throughout. Each returns when its fault is healed.
 */
export interface ScenarioContext {
  readonly c: Cluster;
  readonly h: History;
  readonly w: Workload;
  /** false once the run's duration is over (a scenario runs to its end regardless) */
  readonly running: () => boolean;
}

export type Scenario = (x: ScenarioContext) => Promise<void>;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Whether the gateway holds key `keyId` active (its SQLite, read-only): delivered, whether or not the cloud has its ack yet. */
function activeOnGateway(gw: GatewayNode, keyId: string): boolean {
  try {
    const db = new Database(gw.sqlitePath, { readonly: true, fileMustExist: true });
    try {
      const row: unknown = db.prepare('SELECT status FROM keys WHERE key_id = ?').get(keyId);
      return typeof row === 'object' && row !== null && 'status' in row && row.status === 'active';
    } finally {
      db.close();
    }
  } catch {
    return false; // busy or not there yet: asked again
  }
}

/**
 * A key delivered to `gw` (active there, or shown `active` by the cloud), valid now and for the run; issues one if
 * needed. An ordinary key unless `kind` asks for a one-time or staff key; `hidden`: one of the scenario's own,
 * which the random workload does not present (so a one-time key is not used up before the scenario uses it).
 */
async function deliveredKey(
  x: ScenarioContext,
  gw: GatewayNode,
  kind: { readonly oneTime?: boolean; readonly staff?: boolean; readonly hidden?: boolean } = {},
): Promise<Key | null> {
  // not bounded by the run's duration: on a slow machine the first key may take longer than that to arrive
  const deadline = performance.now() + 120_000;
  let asked = 0;
  const own: Key[] = [];
  while (performance.now() < deadline) {
    const k = (kind.hidden === true ? own : x.w.keys).find(
      (k) =>
        k.gw === gw &&
        !k.revoked &&
        k.oneTime === (kind.oneTime === true) &&
        k.staff === (kind.staff === true) &&
        k.validFrom < Date.now() &&
        k.validUntil > Date.now() + 600_000 &&
        (x.w.statusOf(k.keyId) === 'active' || activeOnGateway(gw, k.keyId)),
    );
    if (k !== undefined) return k;
    if (asked++ % 10 === 0) {
      const issued = await x.w.issue(gw, false, kind);
      if (issued !== null) own.push(issued);
    }
    await sleep(500);
  }
  return null;
}

/** Presents `k` as `kind` every 300 ms for `ms` (at `lockId`, or a random lock of its gateway). */
async function presentThroughout(x: ScenarioContext, k: Key, kind: 'valid' | 'revoked', ms: number, lockId?: string): Promise<void> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    await x.w.present({ key: k, kind, ...(lockId !== undefined && { lockId }) }).catch(() => {});
    await sleep(300);
  }
}

/** Waits up to `ms` for `f` to hold, asking every 300 ms; whether it did. */
async function until(f: () => boolean | Promise<boolean>, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await f()) return true;
    await sleep(300);
  }
  return false;
}

/** The allowed presents of key `keyId` in the history so far. */
const allowedPresents = (x: ScenarioContext, keyId: string) =>
  x.h.entries.filter((e) => e.what === 'present' && e.keyId === keyId && e.allowed === true).length;

export const SCENARIOS: Record<string, Scenario> = {
  /**
   * The gateway's wall clock stops and its cloud link is cut for the grace plus 8 s, while a delivered key is
   * presented throughout: the lease must run out on real elapsed time (I1 offline grace).
   */
  'stopped-clock': async (x) => {
    const gw = x.c.gateways[0];
    if (gw === undefined) return;
    const k = await deliveredKey(x, gw);
    if (k === null) throw new Error('no key was delivered to the gateway within 120 s');
    const ms = x.c.o.offlineGraceSeconds * 1000 + 8000;
    const f = x.h.add('injector', 'fault', { kind: 'clock+partition', target: gw.id, scenario: 'stopped-clock', keyId: k.keyId });
    x.c.setClock(gw, 0, true);
    x.h.add(gw.id, 'clock-set', { offsetMs: 0, stopped: true });
    gw.cloudLink.setMode('cut');
    await presentThroughout(x, k, 'valid', ms);
    gw.cloudLink.setMode('pass');
    x.c.setClock(gw, 0);
    x.h.add(gw.id, 'clock-set', { offsetMs: 0 });
    x.h.add('injector', 'fault-end', { kind: 'clock+partition', target: gw.id, started: f.i, ms });
  },
  /**
   * Every downlink to the gateway is held in the cloud's backoff, then a delivered key is revoked: the revoke
   * commits but cannot reach the gateway while heartbeats name its seq. The revoked key is presented for the
   * grace plus 8 s: no lease may be renewed over the gap (I1 lease over gap, I1 revoke lag).
   */
  'lease-over-stuck-revoke': async (x) => {
    const gw = x.c.gateways[0];
    if (gw === undefined) return;
    const k = await deliveredKey(x, gw);
    if (k === null) throw new Error('no key was delivered to the gateway within 120 s');
    const ms = x.c.o.offlineGraceSeconds * 1000 + 8000;
    const f = x.h.add('injector', 'fault', { kind: 'stuck-outbox', target: `outbox:${gw.id}`, scenario: 'lease-over-stuck-revoke' });
    await holdOutbox(x.c, gw.id);
    await x.w.revoke(k, false);
    await presentThroughout(x, k, 'revoked', ms);
    const held = await releaseOutbox(x.c, gw.id);
    x.h.add('injector', 'fault-end', { kind: 'stuck-outbox', target: `outbox:${gw.id}`, started: f.i, ms, held });
  },
  /**
   * The cloud is down while a delivered key is presented, so the gateway's decisions wait in the broker for the
   * cloud's session; then the broker restarts without persistence and loses them. The gateway must send again
   * every uplink the cloud has not acknowledged (I2 audit exactly once). Twice, so one lucky timing does not hide it.
   */
  'uplink-dropped-on-puback': async (x) => {
    const gw = x.c.gateways[0];
    if (gw === undefined) return;
    const k = await deliveredKey(x, gw);
    if (k === null) throw new Error('no key was delivered to the gateway within 120 s');
    for (let round = 0; round < 2; round++) {
      const f = x.h.add('injector', 'fault', { kind: 'kill-cloud+kill-broker', target: 'cloud', scenario: 'uplink-dropped-on-puback' });
      await x.c.cloud.kill('SIGKILL');
      await presentThroughout(x, k, 'valid', 3000);
      await x.c.mosquitto.kill();
      await x.c.mosquitto.start(false);
      x.h.add('runner', 'broker-start', { persistence: false, port: x.c.mosquitto.port });
      await x.c.startCloud();
      x.h.add('injector', 'fault-end', { kind: 'kill-cloud+kill-broker', target: 'cloud', started: f.i });
      await presentThroughout(x, k, 'valid', 3000);
    }
  },
  /**
   * The cloud runs with a delay of several seconds between reading the last seq handed out and signing each
   * heartbeat (a hook only chaos/bugs/heartbeat-iat-after-seq.patch reads; the correct cloud ignores it). A key
   * of the scenario's own (the workload's random revokes never touch it) is delivered, its revoke is held in the
   * cloud's backoff (every other downlink flows, so the gateway is not behind on anything else), and the revoke is
   * asked for just after a heartbeat round began: it commits between that round's seq read and its signing. Once
   * that heartbeat arrives the gateway's cloud link is cut (no later heartbeat or resync brings the revoke), and
   * the revoked key is presented for the grace plus 8 s: a lease counted from an `iat` after the commit keeps it
   * open past the bound (I1 revoke lag).
   */
  'heartbeat-iat-after-seq': async (x) => {
    const gw = x.c.gateways[0];
    if (gw === undefined) return;
    const delayMs = 6000;
    const r = x.h.add('injector', 'fault', { kind: 'kill-cloud', target: 'cloud', scenario: 'heartbeat-iat-after-seq', delayMs });
    x.c.cloud.env = { ...x.c.cloud.env, TOBIRA_CHAOS_HEARTBEAT_SIGN_DELAY_MS: String(delayMs) };
    await x.c.cloud.kill('SIGKILL');
    await x.c.startCloud();
    x.h.add('injector', 'fault-end', { kind: 'kill-cloud', target: 'cloud', started: r.i });
    const ms = x.c.o.offlineGraceSeconds * 1000 + 8000;
    let k: Key | null = null;
    let arrived: Entry | null = null;
    const f = x.h.add('injector', 'fault', { kind: 'held-revoke+partition', target: gw.id, scenario: 'heartbeat-iat-after-seq' });
    for (let attempt = 1; attempt <= 3 && arrived?.result !== 'applied'; attempt++) {
      k = await scenarioKey(x, gw, `revoked-${attempt}`, { validFrom: Date.now() - 3_600_000 });
      await holdRevokeOf(x.c, k.keyId);
      // a round ends as its heartbeat arrives and the next begins within a timer interval (1 s): 2 s after an
      // arrival its seq has been read, and its signing is still seconds away
      if ((await nextHeartbeat(x, gw, x.h.now(), 60_000)) === null) throw new Error('no heartbeat reached the gateway within 60 s');
      await sleep(2000);
      await revokeScenarioKey(x, k);
      // a heartbeat the gateway could not apply named the revoke: its round read the seq after the commit (a slow
      // machine), the window was missed, and the resync it starts brings the revoke; again with another key
      arrived = await nextHeartbeat(x, gw, x.h.now(), delayMs + 10_000);
    }
    if (k === null) return;
    gw.cloudLink.setMode('cut');
    x.h.add('injector', 'partition', { target: `${gw.id}-cloud`, afterHeartbeat: arrived?.i ?? null });
    await presentThroughout(x, k, 'revoked', ms);
    gw.cloudLink.setMode('pass');
    const held = await x.c.directDb(async (db) => {
      await db.query('DROP TRIGGER IF EXISTS chaos_hold ON outbox');
      return releaseHeld(db, gw.id);
    });
    x.h.add('injector', 'fault-end', { kind: 'held-revoke+partition', target: gw.id, started: f.i, ms, held });
  },
  /**
   * A key valid only from a minute later, offline-capable (an ordinary key would be refused CLOUD_STALE: trusted
   * time ahead of the heartbeats' `iat` by more than the grace ends the lease, so only the offline cap lets a
   * key reach the validity check), is delivered; then the gateway's wall clock steps two minutes ahead, and the
   * key is presented until it is really valid. Trusted time may run ahead of the proven cloud time by the
   * tolerance (30 s) only: a key opening earlier than that breaks I1 not yet valid.
   */
  'clock-ahead-unbounded': async (x) => {
    const gw = x.c.gateways[0];
    if (gw === undefined) return;
    const aheadMs = 120_000;
    const k = await scenarioKey(x, gw, 'later', { validFrom: Date.now() + 60_000, offlineCapable: true });
    const f = x.h.add('injector', 'fault', { kind: 'clock-ahead', target: gw.id, scenario: 'clock-ahead-unbounded', keyId: k.keyId });
    // trusted time runs ahead of the heartbeats' iat by more than the grace: the gateway fails closed, and
    // healing expects that as after the clock-ahead fault
    gw.aheadUntil = Math.max(gw.aheadUntil, Date.now() + aheadMs);
    x.c.setClock(gw, aheadMs);
    x.h.add(gw.id, 'clock-set', { offsetMs: aheadMs, stopped: false });
    await presentThroughout(x, k, 'valid', Math.max(0, k.validFrom - Date.now()) + 2000);
    x.c.setClock(gw, 0);
    x.h.add(gw.id, 'clock-set', { offsetMs: 0 });
    x.h.add('injector', 'fault-end', { kind: 'clock-ahead', target: gw.id, started: f.i, offsetMs: aheadMs });
  },
  /**
   * A restore from backup must not give a one-time key back: a backup of the gateway's store is taken while a
   * delivered one-time key is still unused, the key is used once (allowed), the cloud records the use, and the
   * backup is put back (the gateway killed, its store replaced, started). The key is then presented for the grace
   * plus 8 s: it must never open again (I1 one-time once); the cloud's sequenced `key_used` revoke and the
   * used key's tombstone in a snapshot are what keep it shut.
   */
  'restore-revives-one-time': async (x) => {
    const gw = x.c.gateways[0];
    if (gw === undefined) return;
    const k = await deliveredKey(x, gw, { oneTime: true, hidden: true });
    if (k === null) throw new Error('no one-time key was delivered to the gateway within 120 s');
    // the gateway's own store holds it too (the backup must have it live and unused)
    if (!(await until(() => activeOnGateway(gw, k.keyId), 30_000))) throw new Error(`one-time key ${k.keyId} never active on ${gw.id}`);
    const f = x.h.add('injector', 'fault', { kind: 'restore', target: gw.id, scenario: 'restore-revives-one-time', keyId: k.keyId });
    const b = await backupGateway(x.c, x.h, gw);
    // one entry: presented until the gateway allows it once
    const used = await until(async () => {
      await x.w.present({ key: k, kind: 'valid' }).catch(() => {});
      return allowedPresents(x, k.keyId) > 0;
    }, 30_000);
    if (!used) throw new Error(`one-time key ${k.keyId} was never allowed`);
    // the cloud recorded the use (its uplink arrived): from now on the cloud holds what the backup lacks
    const recorded = await until(async () => {
      await x.w.pollKeys().catch(() => {});
      return x.w.statusOf(k.keyId) === 'used';
    }, 30_000);
    x.h.add('runner', 'scenario-step', { step: 'use recorded', keyId: k.keyId, recorded });
    await restoreGateway(x.c, x.h, gw, b);
    await presentThroughout(x, k, 'valid', x.c.o.offlineGraceSeconds * 1000 + 8000);
    x.h.add('injector', 'fault-end', { kind: 'restore', target: gw.id, started: f.i });
  },
  /**
   * Privacy must survive a gateway restart: the gateway is killed, the guest turns privacy on while it is away
   * (so only the lock's retained state, re-announced, carries it), and it starts again. A delivered staff key is
   * presented at that door throughout, for the grace plus 5 s after the start: it must never open while the
   * lock's privacy is on (I1 privacy).
   */
  'privacy-lost-on-restart': async (x) => {
    const gw = x.c.gateways[0];
    const lockId = gw?.locks[0];
    if (gw === undefined || lockId === undefined) return;
    const k = await deliveredKey(x, gw, { staff: true });
    if (k === null) throw new Error('no staff key was delivered to the gateway within 120 s');
    const f = x.h.add('injector', 'fault', { kind: 'privacy+kill-gateway', target: gw.id, scenario: 'privacy-lost-on-restart', lockId });
    await presentThroughout(x, k, 'valid', 1000, lockId);
    await gw.child.kill('SIGKILL');
    await setPrivacy(x.c, x.h, gw, lockId, true);
    const presenting = presentThroughout(x, k, 'valid', 20_000 + x.c.o.offlineGraceSeconds * 1000, lockId);
    await x.c.startGateway(gw);
    await presenting;
    await setPrivacy(x.c, x.h, gw, lockId, false);
    x.h.add('injector', 'fault-end', { kind: 'privacy+kill-gateway', target: gw.id, started: f.i, lockId });
  },
};

/** The first heartbeat gateway `gw` logged after runner time `after`, waiting up to `ms`; null if none came. */
async function nextHeartbeat(x: ScenarioContext, gw: GatewayNode, after: number, ms: number): Promise<Entry | null> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    const e = x.h.entries.find((e) => e.who === gw.id && e.what === 'heartbeat' && e.t > after);
    if (e !== undefined) return e;
    await sleep(50);
  }
  return null;
}

/** Scenario keys issued by this run so far (each takes its own PIN). */
let scenarioKeys = 0;

/**
 * A key of the scenario's own for every door of `gw`, issued outside the workload's keys (the workload would
 * revoke it, or present a key valid only later as a valid one), recorded as the workload records its issues so
 * the checker knows its window; returns once the gateway holds it active.
 */
async function scenarioKey(
  x: ScenarioContext,
  gw: GatewayNode,
  name: string,
  o: { readonly validFrom: number; readonly offlineCapable?: boolean },
): Promise<Key> {
  const keyId = `k-${x.c.o.seed}-${name}`;
  // eight digits: never one of the workload's six-digit PINs
  const pin = String(80_000_000 + x.c.o.seed * 100 + ++scenarioKeys);
  const validUntil = Date.now() + 86_400_000;
  const tSend = x.h.now();
  const body = {
    keyId,
    personId: x.c.personId,
    doors: gw.locks.map((l) => gw.doors[l]),
    credential: { type: 'pin', value: pin },
    validFrom: o.validFrom,
    validUntil,
    ...(o.offlineCapable === true && { offlineCapable: true }),
  };
  const res = await x.c.api('POST', '/keys', body);
  x.h.add('injector', 'issue', {
    keyId,
    pin,
    gatewayId: gw.id,
    validFrom: o.validFrom,
    validUntil,
    tSend,
    status: res.status,
    offlineCapable: o.offlineCapable ?? false,
  });
  if (res.status !== 202) throw new Error(`issuing ${keyId}: ${res.status} ${JSON.stringify(res.body)}`);
  const deadline = performance.now() + 60_000;
  while (!activeOnGateway(gw, keyId)) {
    if (performance.now() > deadline) throw new Error(`key ${keyId} was not delivered to the gateway within 60 s`);
    await sleep(300);
  }
  return { keyId, pin, gw, validFrom: o.validFrom, validUntil, revoked: false, oneTime: false, staff: false };
}

/** Revokes a scenario's key, recorded as the workload records its revokes (the checker's proof of the commit). */
async function revokeScenarioKey(x: ScenarioContext, k: Key): Promise<void> {
  const tSend = x.h.now();
  const res = await x.c.api('POST', `/keys/${k.keyId}/revoke`, { reason: 'staff_revoked' });
  const code = typeof res.body === 'object' && res.body !== null && 'code' in res.body ? res.body.code : null;
  x.h.add('injector', 'revoke', { keyId: k.keyId, gatewayId: k.gw.id, tSend, status: res.status, code });
  k.revoked = true;
  if (res.status !== 202 && res.status !== 200) throw new Error(`revoking ${k.keyId}: ${res.status} ${JSON.stringify(res.body)}`);
}

/**
 * Holds the revoke of key `keyId` alone in the cloud's backoff (every other downlink flows): a test trigger like
 * the stuck-outbox fault's, under its name so healing drops it too.
 */
async function holdRevokeOf(c: Cluster, keyId: string): Promise<void> {
  await c.directDb(async (db) => {
    await db.query('CREATE TABLE IF NOT EXISTS chaos_hold_key (key_id text PRIMARY KEY)');
    await db.query(`CREATE OR REPLACE FUNCTION chaos_hold_key() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.type = 'key.revoke' AND EXISTS (SELECT 1 FROM chaos_hold_key WHERE key_id = NEW.key_id)
      THEN NEW.next_attempt_at := NEW.next_attempt_at + 86400000; END IF; RETURN NEW; END $$`);
    await db.query('DROP TRIGGER IF EXISTS chaos_hold ON outbox');
    await db.query('CREATE TRIGGER chaos_hold BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION chaos_hold_key()');
    await db.query('INSERT INTO chaos_hold_key VALUES ($1) ON CONFLICT DO NOTHING', [keyId]);
  });
}
