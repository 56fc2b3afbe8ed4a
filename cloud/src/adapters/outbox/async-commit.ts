/**
 * A FROM item that makes the statement's transaction commit without waiting
 * for its WAL flush (`synchronous_commit = off` for that transaction only,
 * `set_config(…, true)`), for the dispatcher's bookkeeping writes: the
 * claim, the lease renewal and the `sent` mark (the claim's fsync
 * was on every grant's way to its gateway).
 *
 * Safe because delivery is at-least-once by jti, never by these marks: the
 * commit is visible to every other session at once, as any commit (the
 * advisory locks and leases order replicas exactly as before), and a
 * database crash can lose only the last of them, which puts rows back to
 * due: they are published again under the same jti and the gateway
 * deduplicates. What must survive a crash (the key's state, the outbox row
 * itself, a dead letter) still commits with the flush.
 */
export const ASYNC_COMMIT = `(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit`;
