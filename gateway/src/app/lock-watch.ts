/**
 * What this process has heard from each lock since its site link last
 * connected. Privacy is part of a lock's state (LockState.privacy, retained
 * and re-announced on every connect), but the gateway only knows it once a
 * state or privacy event saying so has arrived on the current connection:
 * a privacy "on" sent while the gateway was away (a restart, a broker blip)
 * is otherwise lost, and the last value stored would let staff in. Until it
 * is heard, the lock counts as private for the keys privacy refuses
 * (domain/decide.ts). In memory on purpose: after a restart or a reconnect
 * nothing heard before counts.
 */
export class LockWatch {
  readonly #privacyHeard = new Set<string>();

  /** The site link (re)connected: what was heard on the old connection may be out of date. */
  siteConnected(): void {
    this.#privacyHeard.clear();
  }

  /** A state carrying `privacy`, or a privacy event, arrived from this lock. */
  privacyHeard(lockId: string): void {
    this.#privacyHeard.add(lockId);
  }

  /** Whether the lock has said on this connection whether its guest has privacy on. */
  privacyKnown(lockId: string): boolean {
    return this.#privacyHeard.has(lockId);
  }
}
