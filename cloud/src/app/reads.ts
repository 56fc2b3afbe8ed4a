/**
 * The programmatic API's reads (index.ts `reads.*`). Each has one definition,
 * in the repository of its table (adapters/db/); the admin API uses the same.
 */
export { listAudit, type StoredAccessEvent, type AuditQuery } from '../adapters/db/audit.js';
export { listKeyDeliveries, listOutbox, type OutboxEntry } from '../adapters/db/outbox-reads.js';
export { listRejectedUplinks, listUplinkGaps, type RejectedUplink } from '../adapters/db/uplinks.js';
