/**
 * The outbox row state machine, as a literal table (mirrored in
 * docs/state-machines.md, and enforced by the outbox_status_guard trigger of
 * migration 0003). Each SQL verb module performs exactly its rows.
 */
export const OUTBOX_STATUSES = ['pending', 'sending', 'sent', 'dead'] as const;
export type OutboxStatus = (typeof OUTBOX_STATUSES)[number];

export const OUTBOX_TRANSITIONS: readonly {
  readonly from: OutboxStatus;
  readonly event: string;
  readonly to: OutboxStatus;
  readonly by: string;
}[] = [
  { from: 'pending', event: 'claim', to: 'sending', by: 'claim.ts' },
  { from: 'sending', event: 'lease expired, claim again', to: 'sending', by: 'claim.ts' },
  { from: 'sending', event: 'lease renewed before the next publish of the batch', to: 'sending', by: 'renew.ts' },
  { from: 'sending', event: 'PUBACK, lease still held', to: 'sent', by: 'mark-sent.ts' },
  { from: 'sending', event: 'publish failed, attempts left', to: 'pending', by: 'fail.ts' },
  { from: 'sending', event: 'publish failed, last attempt', to: 'dead', by: 'fail.ts' },
  { from: 'sending', event: 'broker link lost mid-batch, attempt given back', to: 'pending', by: 'fail.ts' },
  { from: 'dead', event: 'operator retry', to: 'pending', by: 'dead-letters.ts' },
];
