import { failLeased } from '../lease-fail.js';

/** Fail for the webhook queue (see failLeased): a dead delivery gets no more attempts; the delivery log keeps every one. */
export const failDelivery = failLeased('webhook_outbox');
