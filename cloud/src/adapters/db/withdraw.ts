import { parseRow } from '@tobira/shared';
import { z } from 'zod';
import type { Queryable } from './db.js';

/**
 * Undoing a booking (or a walk-in sale) that never got its PaymentIntent:
 * the booking's own rows go as if the request had never run, so a refusal
 * changes nothing and the client's retry under the same Idempotency-Key
 * books afresh (with the same stay id and the same Stripe keys, so an intent
 * Stripe did make under them is the one the retry gets). Only while nothing
 * of Stripe's is recorded: a recorded intent keeps the booking. Called in a
 * verb's transaction that holds the row's lock.
 */
export async function withdrawUnpaidStay(q: Queryable, stayId: string): Promise<'withdrawn' | 'kept'> {
  const paid = await q.query('SELECT 1 FROM payments WHERE stay_id = $1 AND intent_id IS NOT NULL', [stayId]);
  if (paid.rows.length > 0) return 'kept';
  await q.query(`DELETE FROM billing_jobs WHERE kind = 'create_intent' AND subject_id IN (SELECT id FROM payments WHERE stay_id = $1)`, [
    stayId,
  ]);
  await q.query('DELETE FROM payments WHERE stay_id = $1', [stayId]);
  await q.query('DELETE FROM stay_nights WHERE stay_id = $1', [stayId]);
  await q.query('DELETE FROM stay_door_nights WHERE stay_id = $1', [stayId]);
  const r = await q.query(`DELETE FROM stays WHERE id = $1 AND status = 'pending'`, [stayId]);
  return r.rowCount === 1 ? 'withdrawn' : 'kept';
}

const WithdrawnWalkIn = z.object({
  plan_id: z.string(),
  person_id: z.string(),
  quota_month: z.string().nullable(),
  quota_returned: z.boolean(),
});

/** The walk-in's row, if pending with no intent recorded, removed; its quota use is the caller's to give back. */
export async function withdrawUnpaidWalkIn(q: Queryable, walkInId: string): Promise<z.infer<typeof WithdrawnWalkIn> | null> {
  const r = await q.query(
    `DELETE FROM walk_ins WHERE id = $1 AND status = 'pending' AND intent_id IS NULL RETURNING plan_id, person_id, quota_month, quota_returned`,
    [walkInId],
  );
  return r.rows[0] === undefined ? null : parseRow('walk_ins', WithdrawnWalkIn, r.rows[0]);
}
