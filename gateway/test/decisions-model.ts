import type { DecisionCode } from '@tobira/shared';

/**
 * The model of door decisions for `decisions-model.test.ts`: what a gateway
 * that follows DESIGN.md §2–§5 must answer at the door, written from the
 * rules, not from the code (no import from `gateway/src`).
 *
 * Time. `real` is real time (the cloud's clock, and the gateway's monotonic
 * clock); the gateway's wall clock reads `real + offset` and can be stepped
 * anywhere (1970 included). Trusted time never goes back and advances with
 * real time while the gateway runs, and a wall clock ahead of real time only
 * makes things end sooner; with a tick at least as often as every command
 * (the daemon ticks every second) that is `real + max(offset now, floor)`,
 * the floor being the largest offset ever seen. Time the gateway spends
 * powered off is not known to it: a restart after `d` ms lowers the floor by
 * `d` (the wall clock still counts, if it is right). A stored cloud message
 * raises the floor to its `iat`: the cloud's clock is the reference.
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
  maxOffset = 0;
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

  constructor(
    readonly keys: readonly KeySpec[],
    start: number,
  ) {
    this.real = start;
    this.cloud = keys.map(() => ({ version: 0, status: 'none' as const, windows: new Map<number, Window>() }));
    this.granted = keys.map(() => []);
    this.revoked = keys.map(() => 0);
  }

  /** The gateway's trusted time. */
  get trusted(): number {
    return this.real + Math.max(this.offset, this.maxOffset);
  }
  get wall(): number {
    return this.real + this.offset;
  }
  /** What the daemon's tick does: the time acted on is persisted. */
  tick(): void {
    this.maxOffset = Math.max(this.maxOffset, this.offset);
  }
  /** The gateway was off for `downMs` of real time and starts again. */
  restartAfter(downMs: number): void {
    this.maxOffset = Math.max(this.maxOffset, this.offset) - downMs;
    this.real += downMs;
    this.boot++;
    this.proven = false;
  }

  /**
   * The gateway receives a signed message. `diesBeforeApply`: the process is
   * killed once it is stored (the next process applies it, as its own).
   */
  deliver(m: Sent, diesBeforeApply = false): Delivery {
    // The verifier's expiry rule (jose): exp <= now - tolerance, in whole seconds.
    if (m.iat + MESSAGE_TTL_SECONDS <= Math.floor(this.trusted / 1000) - SKEW_SECONDS) {
      this.rejectedAny = true;
      return 'rejected';
    }
    if (this.seen.has(m.jti)) return 'duplicate';
    this.seen.add(m.jti);
    this.maxOffset = Math.max(this.maxOffset, m.iat * 1000 - this.real);
    if (m.kind === 'answer') {
      if (m.boot === this.boot && !diesBeforeApply && this.real - m.askedAt <= PROOF_MAX_ROUND_TRIP_MS) {
        this.proven = true;
        this.maxOffset = Math.max(this.maxOffset, m.iat * 1000 + (this.real - m.askedAt) - this.real);
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
    const now = this.trusted;
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
