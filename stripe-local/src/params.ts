/**
 * Request parameters of each endpoint, validated once at the boundary (after
 * form decoding). Unknown parameters are refused as Stripe refuses them
 * ("Received unknown parameter: x"), so a typo in Tobira fails here the way it
 * would against Stripe. `expand` is accepted and ignored: ids are returned.
 */
import { z } from 'zod';

const formBool = z.enum(['true', 'false']).transform((v) => v === 'true');
const formInt = z.string().regex(/^\d+$/, 'must be an integer').transform(Number);
const metadata = z.record(z.string().max(40), z.string().max(500));
const expand = z.array(z.string()).optional();

export const CreatePaymentIntentParams = z.strictObject({
  amount: formInt.pipe(z.number().int().min(1).max(99_999_999)),
  currency: z
    .string()
    .regex(/^[a-zA-Z]{3}$/, 'must be a three-letter ISO currency code')
    .transform((c) => c.toLowerCase()),
  metadata: metadata.optional(),
  description: z.string().max(1000).optional(),
  receipt_email: z.string().optional(),
  customer: z.string().optional(),
  /** the SDK's API version (2026-10-28.endive) names it allowed_payment_method_types; older versions payment_method_types */
  allowed_payment_method_types: z.array(z.string()).optional(),
  payment_method_types: z.array(z.string()).optional(),
  automatic_payment_methods: z.strictObject({ enabled: formBool, allow_redirects: z.enum(['always', 'never']).optional() }).optional(),
  capture_method: z.literal('automatic').optional(),
  confirmation_method: z.literal('automatic').optional(),
  payment_method: z.string().optional(),
  confirm: formBool.optional(),
  return_url: z.string().optional(),
  expand,
});
export type CreatePaymentIntentParams = z.infer<typeof CreatePaymentIntentParams>;

export const ConfirmPaymentIntentParams = z.strictObject({
  payment_method: z.string().optional(),
  return_url: z.string().optional(),
  receipt_email: z.string().optional(),
  expand,
});
export type ConfirmPaymentIntentParams = z.infer<typeof ConfirmPaymentIntentParams>;

export const CancelPaymentIntentParams = z.strictObject({
  cancellation_reason: z.enum(['duplicate', 'fraudulent', 'requested_by_customer', 'abandoned']).optional(),
  expand,
});
export type CancelPaymentIntentParams = z.infer<typeof CancelPaymentIntentParams>;

export const CreateRefundParams = z.strictObject({
  payment_intent: z.string().optional(),
  charge: z.string().optional(),
  amount: formInt.pipe(z.number().int().min(1)).optional(),
  reason: z.enum(['duplicate', 'fraudulent', 'requested_by_customer']).optional(),
  metadata: metadata.optional(),
  expand,
});
export type CreateRefundParams = z.infer<typeof CreateRefundParams>;

export const RetrieveParams = z.strictObject({ expand });

export const ListEventsParams = z.strictObject({
  limit: formInt.pipe(z.number().int().min(1).max(100)).optional(),
  starting_after: z.string().optional(),
  ending_before: z.string().optional(),
  type: z.string().optional(),
  expand,
});
export type ListEventsParams = z.infer<typeof ListEventsParams>;

/** Stripe names the offending parameter in bracket form (`metadata[purpose]`). */
export function paramName(path: readonly PropertyKey[]): string {
  const [head, ...rest] = path.map(String);
  return `${head ?? ''}${rest.map((p) => `[${p}]`).join('')}`;
}
