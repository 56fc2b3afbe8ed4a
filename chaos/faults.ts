import { copyFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { Cluster, GatewayNode } from './cluster.js';
import type { History } from './history.js';
import { pick } from './prng.js';
import type { Proxy } from './proxy.js';
import type { Workload } from './workload.js';

/**
 * The fault injector, driven by the run's seeded PRNG. Each fault is started,
 * held for a random time and healed, and recorded in the history as
 * `fault` (start) and `fault-end`. Faults overlap; a target under a fault
 * (a process down, a link not passing) is not given a second one.
 */
export const FAULT_KINDS = [
  'kill-cloud',
  'kill-gateway',
  'kill-fleet',
  'kill-broker',
  'crash-point',
  'cut',
  'stall',
  'slow',
  'reset',
  'partition',
  'clock',
  'clock-ahead',
  'dup',
  'stuck-outbox',
  'restore',
  'privacy',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** `--faults kill,cut,clock`: group names expand to kinds. */
export function parseFaults(spec: string): FaultKind[] {
  const groups: Record<string, readonly FaultKind[]> = {
    // clock-ahead leaves a gateway failing closed for as long as the step (a day): opt-in, not in `all`
    all: FAULT_KINDS.filter((k) => k !== 'clock-ahead'),
    kill: ['kill-cloud', 'kill-gateway', 'kill-fleet', 'kill-broker', 'crash-point'],
    link: ['cut', 'stall', 'slow', 'reset'],
    net: ['cut', 'stall', 'slow', 'reset', 'partition', 'dup'],
  };
  const out = new Set<FaultKind>();
  for (const s of spec.split(',').map((x) => x.trim())) {
    if (s === '') continue;
    const g = groups[s];
    if (g) for (const k of g) out.add(k);
    else if ((FAULT_KINDS as readonly string[]).includes(s)) out.add(s as FaultKind);
    else
      throw new Error(`unknown fault ${JSON.stringify(s)}; kinds: ${FAULT_KINDS.join(', ')} or groups ${Object.keys(groups).join(', ')}`);
  }
  return [...out];
}

const GATEWAY_CRASH_POINTS = ['afterInboxInsertBeforeApply', 'afterApplyBeforeAck', 'afterDecisionBeforePublish'] as const;
/** How often each kind is drawn relative to the others: killing a process costs seconds of restart, a link fault nothing. */
const WEIGHT: Record<FaultKind, number> = {
  'kill-cloud': 1,
  'kill-gateway': 1,
  'kill-fleet': 1,
  'kill-broker': 1,
  'crash-point': 1,
  cut: 3,
  stall: 2,
  slow: 2,
  reset: 3,
  partition: 1,
  clock: 2,
  'clock-ahead': 1,
  dup: 2,
  'stuck-outbox': 1,
  restore: 1,
  privacy: 2,
};
/** A target is left alone this long after it healed, so the system can show it recovers (ms). */
const COOLDOWN_MS = { process: 4000, link: 500 };

/** `clock`: 1970, a day back, ten minutes back, or stopped where it is; `clock-ahead`: ten minutes or a day ahead. */
const CLOCK_STEPS = (now: number, ahead: boolean) => (ahead ? [600_000, 86_400_000] : [0, -now + 1000, -86_400_000, -600_000]);

export class Injector {
  readonly counts: Record<string, number> = {};
  readonly #busy = new Set<string>();
  readonly #running = new Set<Promise<void>>();
  #stopped = false;

  constructor(
    readonly c: Cluster,
    readonly h: History,
    readonly r: () => number,
    readonly kinds: readonly FaultKind[],
    /** the run's workload: a privacy fault presents its staff and one-time keys at the private door */
    readonly w?: Workload,
  ) {}

  get total(): number {
    return Object.values(this.counts).reduce((a, b) => a + b, 0);
  }

  #hold(minMs: number, maxMs: number): Promise<void> {
    return new Promise((res) => setTimeout(res, minMs + this.r() * (maxMs - minMs)));
  }

  /** Starts one fault (not awaited: faults overlap). */
  inject(): void {
    if (this.kinds.length === 0 || this.#stopped) return;
    const total = this.kinds.reduce((a, k) => a + WEIGHT[k], 0);
    let x = this.r() * total;
    const kind = this.kinds.find((k) => (x -= WEIGHT[k]) < 0) ?? pick(this.r, this.kinds);
    const p = this.#run(kind).catch((e: unknown) => {
      this.h.add('injector', 'fault-error', { kind, error: String(e) });
    });
    this.#running.add(p);
    void p.finally(() => this.#running.delete(p));
  }

  /** Waits for the faults in progress to heal themselves. */
  async drain(): Promise<void> {
    this.#stopped = true;
    await Promise.all([...this.#running]);
  }

  async #claim(target: string, f: () => Promise<Record<string, unknown>>, kind: FaultKind): Promise<void> {
    if (this.#busy.has(target)) return;
    this.#busy.add(target);
    this.counts[kind] = (this.counts[kind] ?? 0) + 1;
    const start = this.h.add('injector', 'fault', { kind, target });
    try {
      const detail = await f();
      this.h.add('injector', 'fault-end', { kind, target, started: start.i, ...detail });
    } finally {
      const cool =
        target.startsWith('link:') || target.startsWith('dup:') || target.startsWith('clock:') || target.startsWith('privacy:')
          ? COOLDOWN_MS.link
          : COOLDOWN_MS.process;
      setTimeout(() => this.#busy.delete(target), this.#stopped ? 0 : cool);
    }
  }

  async #restartGateway(g: GatewayNode, crashAt?: string): Promise<void> {
    await this.c.startGateway(g, crashAt);
  }

  async #run(kind: FaultKind): Promise<void> {
    const c = this.c;
    const gw = pick(this.r, c.gateways);
    switch (kind) {
      case 'kill-cloud':
        return this.#claim(
          'cloud',
          async () => {
            await c.cloud.kill('SIGKILL');
            await this.#hold(0, 3000);
            await c.startCloud();
            return {};
          },
          kind,
        );
      case 'kill-gateway':
        return this.#claim(
          gw.id,
          async () => {
            await gw.child.kill('SIGKILL');
            await this.#hold(0, 3000);
            await this.#restartGateway(gw);
            return {};
          },
          kind,
        );
      case 'crash-point': {
        const point = pick(this.r, GATEWAY_CRASH_POINTS);
        return this.#claim(
          gw.id,
          async () => {
            await gw.child.kill('SIGKILL');
            // it runs until the named point is reached (then SIGKILLs itself), or for a while
            let hit = false;
            try {
              await this.#restartGateway(gw, point);
            } catch {
              // it reached the point while starting (a pending inbox row, a queued decision)
              hit = true;
            }
            hit ||= await Promise.race([
              new Promise<boolean>((res) => gw.child.process?.once('exit', () => res(true))),
              this.#hold(3000, 10_000).then(() => false),
            ]);
            await gw.child.kill('SIGKILL');
            await this.#restartGateway(gw);
            return { point, hit };
          },
          kind,
        );
      }
      case 'kill-fleet':
        return this.#claim(
          `${gw.id}-fleet`,
          async () => {
            await gw.fleet.kill('SIGKILL');
            await this.#hold(0, 2000);
            await c.startFleet(gw);
            return {};
          },
          kind,
        );
      case 'kill-broker':
        return this.#claim(
          'broker',
          async () => {
            await c.mosquitto.kill();
            await this.#hold(0, 2000);
            const persistence = this.r() < 0.5;
            await c.mosquitto.start(persistence);
            return { persistence };
          },
          kind,
        );
      case 'cut':
      case 'stall':
      case 'slow':
      case 'reset': {
        const link = pick(this.r, c.links);
        return this.#claim(
          `link:${link.name}`,
          async () => {
            if (kind === 'reset') {
              link.proxy.reset();
              return { link: link.name };
            }
            const slowMs = kind === 'slow' ? 20 + Math.floor(this.r() * 400) : 0;
            link.proxy.setMode(kind, slowMs);
            await this.#hold(300, 5000);
            link.proxy.setMode('pass');
            return { link: link.name, ...(kind === 'slow' && { slowMs }) };
          },
          kind,
        );
      }
      case 'partition':
        // longer than offlineGraceSeconds: the site must fail closed, and recover after
        return this.#claim(
          `link:${gw.id}-cloud`,
          async () => {
            gw.cloudLink.setMode('cut');
            const ms = c.o.offlineGraceSeconds * 1000 + 1000 + this.r() * 5000;
            await this.#hold(ms, ms);
            gw.cloudLink.setMode('pass');
            return { ms: Math.round(ms) };
          },
          kind,
        );
      case 'clock':
      case 'clock-ahead':
        return this.#claim(
          `clock:${gw.id}`,
          async () => {
            const offset = pick(this.r, CLOCK_STEPS(Date.now(), kind === 'clock-ahead'));
            // trusted time never goes back (docs/gateway.md): a clock that was ahead leaves the gateway failing
            // closed until real time catches up with what it read; healing then expects that, not a fresh site
            if (offset > 0) gw.aheadUntil = Math.max(gw.aheadUntil, Date.now() + offset);
            // offset 0 stopped: the clock stops where it is; otherwise stopped one time in three
            const stopped = offset === 0 || this.r() < 0.33;
            c.setClock(gw, offset, stopped);
            this.h.add(gw.id, 'clock-set', { offsetMs: offset, stopped });
            // a clock back or stopped is held long enough to outlast a partition's grace
            await (kind === 'clock' ? this.#hold(5000, 30_000) : this.#hold(1000, 15_000));
            c.setClock(gw, 0);
            this.h.add(gw.id, 'clock-set', { offsetMs: 0 });
            return { offsetMs: offset, stopped };
          },
          kind,
        );
      case 'restore':
        // the gateway's store put back from a backup taken seconds earlier, while it ran: what it did since (one-time
        // entries, applied revokes, uplinks the cloud acknowledged) is gone from its disk, not from the cloud
        return this.#claim(
          gw.id,
          async () => {
            const b = await backupGateway(c, this.h, gw);
            const ms = 2000 + this.r() * 6000;
            await this.#hold(ms, ms);
            await restoreGateway(c, this.h, gw, b);
            return { heldMs: Math.round(ms), backup: b.file };
          },
          kind,
        );
      case 'privacy': {
        // the guest inside turns privacy on for a while: staff and one-time keys stay out of that door meanwhile
        const lockId = pick(this.r, gw.locks);
        return this.#claim(
          `privacy:${gw.id}/${lockId}`,
          async () => {
            await setPrivacy(c, this.h, gw, lockId, true);
            const ms = 2000 + this.r() * 13_000;
            // someone with a staff or one-time key tries that door meanwhile (the random presents rarely would)
            const end = performance.now() + ms;
            while (performance.now() < end) {
              const refused = (this.w?.keys ?? []).filter(
                (k) => k.gw === gw && !k.revoked && k.validUntil > Date.now() + 1000 && (k.staff || k.oneTime),
              );
              if (refused.length > 0) await this.w?.present({ key: pick(this.r, refused), kind: 'valid', lockId }).catch(() => {});
              await this.#hold(300, 800);
            }
            await setPrivacy(c, this.h, gw, lockId, false);
            return { lockId, ms: Math.round(ms) };
          },
          kind,
        );
      }
      case 'stuck-outbox':
        // a stuck row: every downlink the cloud hands out to this gateway is born held in the dispatcher's
        // backoff (a test trigger on outbox, as fail-closed-holes.test.ts does); heartbeats still name its seq
        return this.#claim(
          `outbox:${gw.id}`,
          async () => {
            const ms = 3000 + this.r() * (c.o.offlineGraceSeconds * 1000 + 10_000);
            await holdOutbox(c, gw.id);
            await this.#hold(ms, ms);
            const held = await releaseOutbox(c, gw.id);
            return { ms: Math.round(ms), held };
          },
          kind,
        );
      case 'dup': {
        const link = pick(
          this.r,
          c.links.filter((l) => l.name !== 'cloud-pg'),
        );
        return this.#claim(
          `dup:${link.name}`,
          async () => {
            const before = link.proxy.stats.duplicated;
            link.proxy.setDup(0.3);
            await this.#hold(1000, 8000);
            link.proxy.setDup(0);
            return { link: link.name, duplicated: link.proxy.stats.duplicated - before };
          },
          kind,
        );
      }
    }
  }
}

/** A consistent copy of a running gateway's store, and when it was taken (runner time: it holds what was committed before `t0`). */
export interface GatewayBackup {
  readonly file: string;
  /** runner time the backup began: every decision committed before it is in the copy */
  readonly t0: number;
  readonly line: number;
}

let backups = 0;

/**
 * Backs up the gateway's SQLite while it runs (the online backup API on a read-only connection, so the copy is
 * one consistent point of the WAL), recorded as `restore-backup`.
 */
export async function backupGateway(c: Cluster, h: History, gw: GatewayNode): Promise<GatewayBackup> {
  const file = join(gw.dir, `backup-${++backups}.sqlite`);
  const t0 = h.now();
  const src = new Database(gw.sqlitePath, { readonly: true, fileMustExist: true });
  try {
    await src.backup(file);
  } finally {
    src.close();
  }
  const e = h.add(gw.id, 'restore-backup', { gatewayId: gw.id, file, tBackup: t0 });
  return { file, t0, line: e.i };
}

/**
 * Kills the gateway (`SIGKILL`), puts the backup in place of its store (the WAL and shared-memory files of the
 * lost store removed) and starts it again. The `restore` line says which span of its history is lost:
 * whatever it committed from `tBackup` to its kill.
 */
export async function restoreGateway(c: Cluster, h: History, gw: GatewayNode, b: GatewayBackup): Promise<void> {
  await gw.child.kill('SIGKILL');
  copyFileSync(b.file, gw.sqlitePath);
  rmSync(`${gw.sqlitePath}-wal`, { force: true });
  rmSync(`${gw.sqlitePath}-shm`, { force: true });
  h.add(gw.id, 'restore', { gatewayId: gw.id, tBackup: b.t0, backupLine: b.line });
  await c.startGateway(gw);
}

/**
 * Privacy on or off at a lock (the guest's thumb-turn), recorded as `privacy` with the lock's own state after
 * it (`privacy`) and whether the lock was connected: `asked` is recorded before the command goes out, so an off
 * is in force for the checker from the moment it was asked, an on only once the lock took it.
 */
export async function setPrivacy(c: Cluster, h: History, gw: GatewayNode, lockId: string, on: boolean): Promise<void> {
  h.add(`${gw.id}-fleet`, 'privacy-ask', { gatewayId: gw.id, lockId, active: on });
  const a = await c.setPrivacy(gw, lockId, on);
  const res = typeof a.result === 'object' && a.result !== null ? (a.result as Record<string, unknown>) : null;
  h.add(`${gw.id}-fleet`, 'privacy', {
    gatewayId: gw.id,
    lockId,
    active: on,
    privacy: typeof res?.privacy === 'boolean' ? res.privacy : null,
    connected: res?.connected ?? null,
    error: a.error ?? null,
  });
}

/** The stuck-outbox fault's start: every downlink the cloud hands out to `gatewayId` from now on is born held in its backoff. */
export async function holdOutbox(c: Cluster, gatewayId: string): Promise<void> {
  await c.directDb(async (db) => {
    await db.query('CREATE TABLE IF NOT EXISTS chaos_hold (gateway_id text PRIMARY KEY)');
    await db.query(`CREATE OR REPLACE FUNCTION chaos_hold() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF EXISTS (SELECT 1 FROM chaos_hold WHERE gateway_id = NEW.gateway_id)
      THEN NEW.next_attempt_at := NEW.next_attempt_at + 86400000; END IF; RETURN NEW; END $$`);
    await db.query('DROP TRIGGER IF EXISTS chaos_hold ON outbox');
    await db.query('CREATE TRIGGER chaos_hold BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION chaos_hold()');
    await db.query('INSERT INTO chaos_hold VALUES ($1) ON CONFLICT DO NOTHING', [gatewayId]);
  });
}

/** The stuck-outbox fault's end: no new row is held, and the held ones are due now; returns how many were held. */
export async function releaseOutbox(c: Cluster, gatewayId: string): Promise<number> {
  return c.directDb(async (db) => {
    await db.query('DELETE FROM chaos_hold WHERE gateway_id = $1', [gatewayId]);
    return releaseHeld(db, gatewayId);
  });
}

/** Makes every row held by the stuck-outbox fault due now; returns how many there were. */
export async function releaseHeld(
  db: { query: (q: string, v: unknown[]) => Promise<{ rowCount: number | null }> },
  gatewayId: string | null,
): Promise<number> {
  const now = Date.now();
  const r = await db.query(
    "UPDATE outbox SET next_attempt_at = $1 WHERE status = 'pending' AND next_attempt_at > $2 AND ($3::text IS NULL OR gateway_id = $3)",
    [now, now + 3_600_000, gatewayId],
  );
  return r.rowCount ?? 0;
}

export type { Proxy };
