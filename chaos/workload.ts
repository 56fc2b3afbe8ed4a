import type { Cluster, GatewayNode } from './cluster.js';
import type { History } from './history.js';
import { pick } from './prng.js';

/**
 * The workload (docs/reliability.md): issues, revokes and re-issues keys
 * through the admin API and presents valid, revoked, expired and wrong PINs
 * at the sim locks, recording every request and answer in the history.
 */
export interface Key {
  readonly keyId: string;
  readonly pin: string;
  readonly gw: GatewayNode;
  readonly validFrom: number;
  readonly validUntil: number;
  /** a one-time key: its first entry uses it up (presented as valid again and again all the same) */
  readonly oneTime: boolean;
  /** a staff key: privacy at a door keeps it out */
  readonly staff: boolean;
  /** a revoke was asked for: answered 2xx, or its answer was lost (it may have committed) */
  revoked: boolean;
}

/**
 * The revoked keys a person tries again: every one whose revoke the cloud has not shown acknowledged
 * (`revoked`), however long ago it was asked for, so a revoke stuck anywhere keeps being tested.
 */
export function revokedToPresent<K extends { readonly keyId: string; readonly revoked: boolean }>(
  keys: readonly K[],
  status: ReadonlyMap<string, string>,
): K[] {
  return keys.filter((k) => k.revoked && status.get(k.keyId) !== 'revoked');
}

/**
 * A schedule of one window, in UTC, from the minute after the next one for two minutes: presented as valid
 * throughout, such a key must open only inside it (in real time, the clock tolerance early at most), whatever
 * the gateway's clock says. Daily windows: a run is shorter than the day until the window comes again.
 */
export function scheduleWindow(now: number): { schedule: unknown; from: number; until: number } {
  const from = Math.floor(now / 60_000) * 60_000 + 120_000;
  const until = from + 120_000;
  const hhmm = (ms: number) => new Date(ms).toISOString().slice(11, 16);
  return {
    schedule: { timeZone: 'UTC', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: hhmm(from), end: hhmm(until) }] },
    from,
    until,
  };
}

export class Workload {
  readonly keys: Key[] = [];
  readonly #pins = new Set<string>();
  #n = 0;
  ops = 0;
  readonly #status = new Map<string, string>();

  constructor(
    readonly c: Cluster,
    readonly h: History,
    readonly r: () => number,
  ) {}

  #newPin(): string {
    for (;;) {
      const pin = String(100000 + Math.floor(this.r() * 900000));
      if (!this.#pins.has(pin)) {
        this.#pins.add(pin);
        return pin;
      }
    }
  }

  async step(): Promise<void> {
    this.ops++;
    const x = this.r();
    const live = this.keys.filter((k) => !k.revoked);
    // one issue in five is a one-time key and one in five a staff key (from the same draw: the seeds of older runs
    // draw the same faults and operations)
    if (x < 0.2 || this.keys.length < 3)
      return void (await this.issue(undefined, undefined, {
        oneTime: x < 0.04,
        staff: x >= 0.04 && x < 0.08,
        scheduled: x >= 0.08 && x < 0.12,
      }));
    if (x < 0.3 && live.length > 0) return this.revoke(pick(this.r, live), x < 0.25);
    return this.present();
  }

  /**
   * Issues a key for every door of `gw`; `kind.hidden`: not one the random workload presents (a targeted
   * scenario's own). Resolves with the key the cloud accepted, or null.
   */
  async issue(
    gw = pick(this.r, this.c.gateways),
    shortLived = this.r() < 0.15,
    kind: { readonly oneTime?: boolean; readonly staff?: boolean; readonly scheduled?: boolean; readonly hidden?: boolean } = {},
  ): Promise<Key | null> {
    const oneTime = kind.oneTime === true;
    const staff = kind.staff === true;
    const window = kind.scheduled === true ? scheduleWindow(Date.now()) : null;
    const keyId = `k-${this.c.o.seed}-${++this.#n}`;
    const pin = this.#newPin();
    const now = Date.now();
    const validUntil = shortLived ? now + 3000 + Math.floor(this.r() * 15_000) : now + 86_400_000;
    // one long-lived key in ten starts later than the clock tolerance ahead (a booking for later): presented
    // as valid from the start, it must not open before then, whatever the gateway's clock says
    const validFrom = !shortLived && this.r() < 0.1 ? now + 35_000 + Math.floor(this.r() * 15_000) : now - 3_600_000;
    const body = {
      keyId,
      personId: this.c.personId,
      doors: gw.locks.map((l) => gw.doors[l]),
      credential: { type: 'pin', value: pin },
      validFrom,
      validUntil,
      ...(oneTime && { oneTime: true }),
      ...(staff && { staff: true }),
      ...(window !== null && { schedule: window.schedule }),
    };
    const tSend = this.h.now();
    try {
      const res = await this.c.api('POST', '/keys', body);
      const code = typeof res.body === 'object' && res.body !== null && 'code' in res.body ? res.body.code : null;
      this.h.add('workload', 'issue', {
        keyId,
        pin,
        gatewayId: gw.id,
        validFrom,
        validUntil,
        oneTime,
        staff,
        ...(window !== null && { scheduleFrom: window.from, scheduleUntil: window.until }),
        tSend,
        status: res.status,
        code,
      });
      if (res.status !== 202) return null;
      const k: Key = { keyId, pin, gw, validFrom, validUntil, oneTime, staff, revoked: false };
      if (kind.hidden !== true) this.keys.push(k);
      return k;
    } catch (e) {
      this.h.add('workload', 'issue', { keyId, pin, gatewayId: gw.id, validUntil, oneTime, staff, tSend, status: 0, error: String(e) });
      return null;
    }
  }

  async revoke(k: Key, reissue: boolean): Promise<void> {
    const tSend = this.h.now();
    try {
      const res = await this.c.api('POST', `/keys/${k.keyId}/revoke`, { reason: reissue ? 'credential_lost' : 'staff_revoked' });
      const code = typeof res.body === 'object' && res.body !== null && 'code' in res.body ? res.body.code : null;
      this.h.add('workload', 'revoke', { keyId: k.keyId, gatewayId: k.gw.id, tSend, status: res.status, code });
      if (res.status === 202 || res.status === 200) {
        k.revoked = true;
        // most recently revoked last
        this.keys.splice(this.keys.indexOf(k), 1);
        this.keys.push(k);
      }
      if (reissue && k.revoked) await this.issue(k.gw, false, { oneTime: k.oneTime, staff: k.staff });
    } catch (e) {
      this.h.add('workload', 'revoke', { keyId: k.keyId, gatewayId: k.gw.id, tSend, status: 0, error: String(e) });
      // the answer was lost, not necessarily the revoke: from now on the key is presented as revoked
      // (the checker learns whether it committed from the cloud), never as valid
      k.revoked = true;
    }
  }

  /** A random present; `force`: this key, presented as this kind (a targeted scenario's), at `lockId` if given. */
  async present(force?: { readonly key: Key; readonly kind: 'valid' | 'revoked'; readonly lockId?: string }): Promise<void> {
    const gw = force?.key.gw ?? pick(this.r, this.c.gateways);
    const drawn = pick(this.r, gw.locks);
    const lockId = force?.lockId ?? drawn;
    const mine = this.keys.filter((k) => k.gw === gw);
    const x = this.r();
    const now = Date.now();
    let kind: 'valid' | 'revoked' | 'expired' | 'wrong' = 'wrong';
    let key: Key | undefined;
    const valid = mine.filter((k) => !k.revoked && k.validUntil > now + 1000);
    // a person whose key was revoked tries again, until the cloud shows the revoke acknowledged
    const revoked = revokedToPresent(mine, this.#status);
    const expired = mine.filter((k) => !k.revoked && k.validUntil < now);
    if (x < 0.5 && valid.length > 0) [kind, key] = ['valid', pick(this.r, valid)];
    else if (x < 0.7 && revoked.length > 0) [kind, key] = ['revoked', pick(this.r, revoked)];
    else if (x < 0.85 && expired.length > 0) [kind, key] = ['expired', pick(this.r, expired)];
    if (force !== undefined) [kind, key] = [force.kind, force.key];
    const pin = key?.pin ?? this.#newPin();
    const tSend = this.h.now();
    const wallSend = Date.now();
    const a = await this.c.present(gw, lockId, pin);
    const res = typeof a.result === 'object' && a.result !== null ? (a.result as Record<string, unknown>) : null;
    const d = res && typeof res.decision === 'object' && res.decision !== null ? (res.decision as Record<string, unknown>) : null;
    const cmd = res && typeof res.command === 'object' && res.command !== null ? (res.command as Record<string, unknown>) : null;
    this.h.add('workload', 'present', {
      gatewayId: gw.id,
      lockId,
      kind,
      keyId: key?.keyId ?? null,
      tSend,
      wallSend,
      status: res?.status ?? 'error',
      error: a.error ?? null,
      requestId: res?.requestId ?? null,
      decided: res?.status === 'decided',
      allowed: d?.allowed ?? null,
      code: d?.code ?? null,
      commandId: d?.commandId ?? null,
      command: cmd?.result ?? null,
    });
  }

  /** The cloud's last shown status of a key (from the poller). */
  statusOf(keyId: string): string | undefined {
    return this.#status.get(keyId);
  }

  /** Polls the cloud's view of every key; records each status change (an acked revoke is `revoked`). */
  async pollKeys(): Promise<void> {
    for (const gw of this.c.gateways) {
      let cursor: string | null = null;
      do {
        const q: string = `/keys?gatewayId=${gw.id}&limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
        const res = await this.c.api('GET', q, undefined, 3000);
        if (res.status !== 200 || typeof res.body !== 'object' || res.body === null) return;
        const body = res.body as { items?: { id: string; status: string; version: number }[]; nextCursor?: string | null };
        for (const k of body.items ?? []) {
          if (this.#status.get(k.id) === k.status) continue;
          this.#status.set(k.id, k.status);
          // a revoke committed whatever its answer said (a lost answer, a revoke from elsewhere)
          if (k.status === 'revoking' || k.status === 'revoked') {
            const mineK = this.keys.find((x) => x.keyId === k.id);
            if (mineK !== undefined) mineK.revoked = true;
          }
          this.h.add('cloud', 'key-status', { keyId: k.id, gatewayId: gw.id, status: k.status, version: k.version });
        }
        cursor = body.nextCursor ?? null;
      } while (cursor !== null);
    }
  }
}
