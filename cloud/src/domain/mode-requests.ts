/**
 * A mode request's status per gateway (`mode_requests`, migrations 0025 and
 * 0027; docs/state-machines.md "Mode request"): `pending` from the request
 * until that gateway acked its site.mode, or acked a resync snapshot whose
 * `asOfSeq` covers the request's seq (the snapshot carried the site's mode).
 * `applied` and `refused` are final. The database enforces this table (the
 * verb guard, from `verb-guards.ts`): a row is inserted `pending` under
 * `tobira.verb = requestMode`, and leaves `pending` only under
 * `tobira.verb = settleModeRequest`.
 */
export type ModeRequestStatus = 'pending' | 'applied' | 'refused';

export const MODE_REQUEST_TRANSITIONS = [
  { from: null, event: 'request', to: 'pending', verb: 'requestMode' },
  { from: 'pending', event: 'gateway acked applied or noop', to: 'applied', verb: 'settleModeRequest' },
  { from: 'pending', event: 'gateway acked refused', to: 'refused', verb: 'settleModeRequest' },
  { from: 'pending', event: 'snapshot covering its seq acked', to: 'applied', verb: 'settleModeRequest' },
] as const satisfies readonly { from: ModeRequestStatus | null; event: string; to: ModeRequestStatus; verb: string }[];
