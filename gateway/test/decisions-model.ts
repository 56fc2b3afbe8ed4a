import type { DecisionCode } from '@tobira/shared';

/**
 * The model of door decisions for `decisions-model.test.ts`: what a gateway
 * that follows docs/gateway.md and docs/protocol.md must answer at the door, written from the
 * rules, not from the code (no import from `gateway/src`).
 *
 * Time. `real` is real time (the cloud's clock, and the gateway's monotonic
 * clock); the gateway's wall clock reads `real + offset` and can be stepped
 * anywhere (1970 included). Trusted time is the latest of the wall clock and
 * a floor; the floor is the newest stored `iat` and the highest time acted on
 * (both kept on disk), carried forward by real time while the process runs.
 * Time the gateway spends powered off is not known to it: after a restart the
 * floor starts again from what is on disk. Once the cloud has proven the time
 * to the process (below), the time it proved, carried forward by real time
 * and raised by any newer stored `iat`, plus CLOCK_SKEW_TOLERANCE_MS, is a
 * ceiling: the wall clock counts only up to it, a time acted on above it is
 * lowered to it at the next tick, and the floor counts such a time only up to
 * it. So a wall clock ahead of real time opens nothing early, and ends things
 * at most the tolerance sooner.
 *
 * Restarts. Because of that, a started process has not proven the time: its
 * lease counts as none (ordinary and offline-capable keys are CLOUD_STALE)
 * until it applies the cloud's answer to a resync request made by this same
 * process, which raises the floor to the answer's `iat` plus the time since
 * the request (the round trip). An answer to an earlier process's request
 * (in flight across the restart, or replayed) proves nothing, nor does one
 * that comes more than PROOF_MAX_ROUND_TRIP_MS after its request.
 *
 * Key set. Sequenced messages apply in seq order, whatever order they arrive
 * in; a message id is applied once. A key opens iff its highest granted
 * version is above its highest revoked version, and, for a one-time key, no
 * door has opened for it yet (a decision, once committed, is never undone:
 * a crash after it does not give the entry back).
 *
 * Lease. A heartbeat proves freshness as of its `iat` once everything up to
 * its `lastSeq` is applied: at arrival, or (for the last heartbeat that found
 * the gateway behind) once the missing seqs are applied. The lease is the
 * latest `iat + grace` proven, never shorter. A key that is not
 * offline-capable opens only while trusted time is before it; an
 * offline-capable one also within its offline cap of the last proof.
 */
export const GRACE_SECONDS = 300;
/** Message lifetime (shared DEFAULT_TTL_SECONDS) and the verifier's tolerance. */
export const MESSAGE_TTL_SECONDS = 86_400;
export const SKEW_SECONDS = 60;
/** The longest round trip of a resync answer that still proves the time after a restart. */
export const PROOF_MAX_ROUND_TRIP_MS = 10_000;
/** How far ahead of the proven cloud time the wall clock may count. */
export const CLOCK_SKEW_TOLERANCE_MS = 30_000;

export interface KeySpec {
  readonly keyId: string;
  readonly pin: string;
  readonly doors: readonly string[];
  readonly offlineCapable: boolean;
  readonly offlineMaxSeconds?: number;
  /** A one-time key: its first ALLOWED consumes it; after that it is KEY_USED, whatever version is granted. */
  readonly oneTime?: boolean;
}

export interface Window {
  readonly validFrom: number;
  readonly validUntil: number;
}

interface Base {
  readonly jti: string;
  /** Whole seconds, as signed. */
  readonly iat: number;
}
export type Sent =
  | (Base & { readonly kind: 'grant'; readonly seq: number; readonly key: number; readonly version: number; readonly window: Window })
  | (Base & { readonly kind: 'revoke'; readonly seq: number; readonly key: number; readonly version: number })
  | (Base & { readonly kind: 'heartbeat'; readonly lastSeq: number })
  /** The cloud's answer to the resync request the process of start number `boot` made at real time `askedAt`. */
  | (Base & { readonly kind: 'answer'; readonly boot: number; readonly askedAt: number });

export type Delivery = 'stored' | 'duplicate' | 'rejected';

export interface Prediction {
  readonly allowed: boolean;
  readonly code: DecisionCode;
}

export class Model {
  // --- the world
  real: number;
  offset = 0;
  // --- the gateway's time: on disk, and in the running process
  stored = { iatMs: 0, actedMs: 0 };
  floorAnchor: { ms: number; atReal: number } | null = null;
  cloudAnchor: { ms: number; atReal: number } | null = null;
  // --- the cloud
  seq = 0;
  readonly cloud: { version: number; status: 'none' | 'active' | 'revoked'; windows: Map<number, Window> }[];
  // --- what the gateway has been given
  readonly seen = new Set<string>();
  readonly waiting = new Map<number, Sent>();
  appliedSeq = 0;
  readonly granted: (Sent & { kind: 'grant' })[][];
  readonly revoked: number[];
  /** One-time keys whose entry was used. */
  readonly used = new Set<number>();
  lease: number | null = null;
  behind: { seq: number; iatMs: number } | null = null;
  rejectedAny = false;
  /** Starts of the gateway process so far (the first is 0), and whether this one has proven the time. */
  boot = 0;
  proven = false;
  /** Resync requests of this process whose answer was stored (`boot:askedAt`), and when it last proved the time (real ms). */
  private answeredAsks = new Set<string>();
  private provenAt: number | null = null;

  constructor(
    readonly keys: readonly KeySpec[],
    start: number,
  ) {
    this.real = start;
    this.cloud = keys.map(() => ({ version: 0, status: 'none' as const, windows: new Map<number, Window>() }));
    this.granted = keys.map(() => []);
    this.revoked = keys.map(() => 0);
  }

  /** The latest real time it can be, as far as this process knows (null: the cloud has not proven the time to it). */
  ceiling(): number | null {
    const c = this.cloudAnchor;
    if (c === null) return null;
    if (this.stored.iatMs > c.ms + (this.real - c.atReal)) this.cloudAnchor = { ms: this.stored.iatMs, atReal: this.real };
    return this.cloudAnchor!.ms + (this.real - this.cloudAnchor!.atReal) + CLOCK_SKEW_TOLERANCE_MS;
  }

  /** The gateway's trusted time now. Reading it carries the floor forward, as the process does. */
  now(): number {
    const ceiling = this.ceiling();
    // a time acted on above the proven cloud time came from a wall clock that ran ahead: it counts only up to that time
    const proven = ceiling === null ? null : ceiling - CLOCK_SKEW_TOLERANCE_MS;
    const stored = Math.max(this.stored.iatMs, proven === null ? this.stored.actedMs : Math.min(this.stored.actedMs, proven));
    const a = this.floorAnchor;
    const carried = a === null ? null : a.ms + (this.real - a.atReal);
    let floor: number;
    if (carried !== null && carried > stored) floor = carried;
    else {
      this.floorAnchor = { ms: stored, atReal: this.real };
      floor = stored;
    }
    return Math.max(ceiling === null ? this.wall : Math.min(this.wall, ceiling), floor);
  }
  get trusted(): number {
    return this.now();
  }
  get wall(): number {
    return this.real + this.offset;
  }
  /** What the daemon's tick does: the time acted on is persisted, and lowered to the ceiling if above it. */
  tick(): void {
    this.acted(this.now());
    const ceiling = this.ceiling();
    if (ceiling !== null && this.stored.actedMs > ceiling) this.stored.actedMs = ceiling;
  }
  private acted(ms: number): void {
    this.stored.actedMs = Math.max(this.stored.actedMs, ms);
  }
  /** The gateway was off for `downMs` of real time and starts again: only what is on disk survives. */
  restartAfter(downMs: number): void {
    this.real += downMs;
    this.boot++;
    this.proven = false;
    this.provenAt = null;
    this.floorAnchor = null;
    this.cloudAnchor = null;
    this.now();
  }

  /**
   * The gateway receives a signed message. `diesBeforeApply`: the process is
   * killed once it is stored (the next process applies it, as its own).
   */
  deliver(m: Sent, diesBeforeApply = false): Delivery {
    // The verifier's expiry rule (jose): exp <= now - tolerance, in whole seconds. An answer to a request of
    // this process still awaited (sent within the proof's round trip, not answered, no proof since) is fresh by
    // that request and judged as of its own iat (downlink.ts), so trusted time pushed ahead cannot refuse it.
    const ask = m.kind === 'answer' ? `${m.boot}:${m.askedAt}` : null;
    const awaited =
      m.kind === 'answer' &&
      m.boot === this.boot &&
      !this.answeredAsks.has(ask!) &&
      (this.provenAt === null || m.askedAt > this.provenAt) &&
      this.real - m.askedAt <= PROOF_MAX_ROUND_TRIP_MS;
    if (!awaited && m.iat + MESSAGE_TTL_SECONDS <= Math.floor(this.now() / 1000) - SKEW_SECONDS) {
      this.rejectedAny = true;
      return 'rejected';
    }
    if (this.seen.has(m.jti)) return 'duplicate';
    this.seen.add(m.jti);
    if (ask !== null && m.kind === 'answer' && m.boot === this.boot) this.answeredAsks.add(ask);
    this.stored.iatMs = Math.max(this.stored.iatMs, m.iat * 1000);
    // the apply runs at the trusted time after the store, and records it as acted on
    const applyAt = this.now();
    if (!diesBeforeApply) this.acted(applyAt);
    if (m.kind === 'answer') {
      if (m.boot === this.boot && !diesBeforeApply && this.real - m.askedAt <= PROOF_MAX_ROUND_TRIP_MS) {
        this.proven = true;
        this.provenAt = this.real;
        // the latest real time it can be: signed after our request, so at most its iat plus the round trip
        const provenMs = m.iat * 1000 + (this.real - m.askedAt);
        this.cloudAnchor = { ms: provenMs, atReal: this.real };
        this.floorAnchor = null;
        this.acted(provenMs);
        this.now();
      }
    } else if (m.kind === 'heartbeat') {
      if (this.appliedSeq >= m.lastSeq) this.extend(m.iat * 1000);
      else this.behind = { seq: m.lastSeq, iatMs: m.iat * 1000 };
    } else {
      this.waiting.set(m.seq, m);
      for (let next = this.waiting.get(this.appliedSeq + 1); next !== undefined; next = this.waiting.get(this.appliedSeq + 1)) {
        this.waiting.delete(this.appliedSeq + 1);
        if (next.kind === 'grant') this.granted[next.key]!.push(next);
        else if (next.kind === 'revoke') this.revoked[next.key] = Math.max(this.revoked[next.key]!, next.version);
        this.appliedSeq++;
      }
    }
    if (this.behind !== null && this.appliedSeq >= this.behind.seq) {
      this.extend(this.behind.iatMs);
      this.behind = null;
    }
    return 'stored';
  }

  private extend(iatMs: number): void {
    const candidate = iatMs + GRACE_SECONDS * 1000;
    this.lease = this.lease === null ? candidate : Math.max(this.lease, candidate);
  }

  /** The key the gateway holds for key index k: its highest granted version, and whether a revoke covers it. */
  held(k: number): { grant: Sent & { kind: 'grant' }; active: boolean } | null {
    const grants = this.granted[k]!;
    if (grants.length === 0) return null;
    const top = grants.reduce((a, b) => (b.version > a.version ? b : a));
    return { grant: top, active: top.version > this.revoked[k]! };
  }

  /** The decision at a door for the PIN of key k (null: a PIN no key has). */
  decide(k: number | null, door: string): Prediction {
    const deny = (code: DecisionCode): Prediction => ({ allowed: false, code });
    if (k === null) return deny('UNKNOWN_CREDENTIAL');
    const held = this.held(k);
    if (held === null) return deny('UNKNOWN_CREDENTIAL');
    if (!held.active) return deny('KEY_REVOKED');
    const spec = this.keys[k]!;
    if (spec.oneTime === true && this.used.has(k)) return deny('KEY_USED');
    if (!spec.doors.includes(door)) return deny('DOOR_NOT_PERMITTED');
    const now = this.now();
    if (now < held.grant.window.validFrom) return deny('KEY_NOT_YET_VALID');
    if (now >= held.grant.window.validUntil) return deny('KEY_EXPIRED');
    // an unproven restart acts on no lease at all
    const lease = this.proven ? this.lease : null;
    const stale = lease === null || now >= lease;
    if (stale) {
      const lastFresh = lease === null ? null : lease - GRACE_SECONDS * 1000;
      const cap = (spec.offlineMaxSeconds ?? 0) * 1000;
      if (!(spec.offlineCapable && lastFresh !== null && now - lastFresh < cap)) return deny('CLOUD_STALE');
    }
    return { allowed: true, code: 'ALLOWED' };
  }

  /** The gateway committed a decision for key k: an allowed one-time key is used from now on. */
  decided(k: number | null, p: Prediction): void {
    if (k !== null && p.allowed && this.keys[k]!.oneTime === true) this.used.add(k);
  }
}
