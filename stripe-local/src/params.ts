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

/** `POST /v1/refunds/:id/cancel` takes nothing but `expand`. */
export const CancelRefundParams = z.strictObject({ expand });
export type CancelRefundParams = z.infer<typeof CancelRefundParams>;

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

export const ListRefundsParams = z.strictObject({
  payment_intent: z.string().optional(),
  charge: z.string().optional(),
  limit: formInt.pipe(z.number().int().min(1).max(100)).optional(),
  starting_after: z.string().optional(),
  expand,
});
export type ListRefundsParams = z.infer<typeof ListRefundsParams>;

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

// ---------------------------------------------------------------- billing (subscriptions)

const currency = z
  .string()
  .regex(/^[a-zA-Z]{3}$/, 'must be a three-letter ISO currency code')
  .transform((c) => c.toLowerCase());
const recurring = z.strictObject({
  interval: z.enum(['day', 'week', 'month', 'year']),
  interval_count: formInt.pipe(z.number().int().min(1).max(12)).optional(),
});
/** `cancel_at_period_end` and friends: Stripe's form booleans */
export const CreateCustomerParams = z.strictObject({
  email: z.string().optional(),
  name: z.string().optional(),
  description: z.string().optional(),
  metadata: metadata.optional(),
  expand,
});
export type CreateCustomerParams = z.infer<typeof CreateCustomerParams>;

export const CreatePriceParams = z.strictObject({
  currency,
  unit_amount: formInt.pipe(z.number().int().min(1).max(99_999_999)),
  recurring: recurring.optional(),
  product: z.string().optional(),
  product_data: z.strictObject({ name: z.string().min(1), metadata: metadata.optional() }).optional(),
  metadata: metadata.optional(),
  expand,
});
export type CreatePriceParams = z.infer<typeof CreatePriceParams>;

export const CreateSubscriptionParams = z.strictObject({
  customer: z.string(),
  items: z
    .array(
      z.strictObject({
        price: z.string().optional(),
        price_data: z
          .strictObject({ currency, product: z.string(), unit_amount: formInt.pipe(z.number().int().min(1)), recurring })
          .optional(),
        quantity: formInt.pipe(z.literal(1)).optional(),
        metadata: metadata.optional(),
      }),
    )
    .min(1)
    .max(1),
  metadata: metadata.optional(),
  /** `default_incomplete`: the first invoice waits for a payment (`incomplete` until paid) — the only mode here */
  payment_behavior: z.enum(['default_incomplete', 'allow_incomplete', 'error_if_incomplete']).optional(),
  default_payment_method: z.string().optional(),
  collection_method: z.literal('charge_automatically').optional(),
  cancel_at_period_end: formBool.optional(),
  payment_settings: z.strictObject({ save_default_payment_method: z.enum(['on_subscription', 'off']).optional() }).optional(),
  description: z.string().optional(),
  expand,
});
export type CreateSubscriptionParams = z.infer<typeof CreateSubscriptionParams>;

export const UpdateSubscriptionParams = z.strictObject({
  cancel_at_period_end: formBool.optional(),
  metadata: metadata.optional(),
  cancellation_details: z.strictObject({ comment: z.string().optional() }).optional(),
  expand,
});
export type UpdateSubscriptionParams = z.infer<typeof UpdateSubscriptionParams>;

export const CancelSubscriptionParams = z.strictObject({
  invoice_now: formBool.optional(),
  prorate: formBool.optional(),
  cancellation_details: z.strictObject({ comment: z.string().optional() }).optional(),
  expand,
});
export type CancelSubscriptionParams = z.infer<typeof CancelSubscriptionParams>;

export const ListInvoicePaymentsParams = z.strictObject({
  invoice: z.string().optional(),
  status: z.enum(['open', 'paid', 'canceled']).optional(),
  limit: formInt.pipe(z.number().int().min(1).max(100)).optional(),
  starting_after: z.string().optional(),
  expand,
});
export type ListInvoicePaymentsParams = z.infer<typeof ListInvoicePaymentsParams>;

export const PayInvoiceParams = z.strictObject({
  payment_method: z.string().optional(),
  expand,
});
export type PayInvoiceParams = z.infer<typeof PayInvoiceParams>;
