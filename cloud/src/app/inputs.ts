import { z } from 'zod';
import {
  CorrelationId,
  CredentialType,
  DoorId,
  GatewayId,
  KeyId,
  OFFLINE_MAX_SECONDS_LIMIT,
  PersonId,
  PresentedCredential,
  RevokeReason,
  Schedule,
  SiteId,
  TimeZone,
  refused,
  summarizeIssues,
  type OutcomeCode,
} from '@tobira/shared';

/**
 * Boundary schemas of the programmatic API (the HTTP layer validates again
 * with its own schemas). Ids must be valid on the wire: an id that could not
 * be signed into a grant would make an outbox row that can never be sent.
 */
const Name = z.string().min(1).max(200);
const Millis = z.int().nonnegative();

export const CreateSiteInput = z.strictObject({
  id: SiteId.optional(),
  name: Name,
  timeZone: TimeZone.optional(),
  offlineGraceSeconds: z
    .int()
    .min(0)
    .max(7 * 86_400)
    .optional(),
});
export const RegisterGatewayInput = z.strictObject({
  gatewayId: GatewayId,
  siteId: SiteId,
  publicJwk: z.record(z.string(), z.unknown()),
  cid: CorrelationId.optional(),
  siteScope: z.array(z.string()).nullable().optional(),
});
export const CreateDoorInput = z.strictObject({
  id: DoorId.optional(),
  gatewayId: GatewayId,
  name: Name,
  siteScope: z.array(z.string()).nullable().optional(),
});
export const CreatePersonInput = z.strictObject({
  id: PersonId.optional(),
  name: Name,
  siteId: SiteId.optional(),
  siteScope: z.array(z.string()).nullable().optional(),
});
export const IssueKeyInput = z.strictObject({
  keyId: KeyId.optional(),
  personId: PersonId,
  doors: z.array(DoorId).min(1).max(256),
  // a clear value, or its digest computed earlier with the same gateway's pepper (a stay's guest credential)
  credential: z.union([
    z.strictObject({ type: CredentialType, value: z.string().max(256) }),
    z.strictObject({ type: CredentialType, digest: z.string().min(1).max(256) }),
  ]),
  validFrom: Millis,
  validUntil: Millis,
  schedule: z.unknown().optional(),
  offlineCapable: z.boolean().optional(),
  offlineMaxSeconds: z.int().min(1).max(OFFLINE_MAX_SECONDS_LIMIT).optional(),
  oneTime: z.boolean().optional(),
  staff: z.boolean().optional(),
  siteScope: z.array(z.string()).nullable().optional(),
  cid: CorrelationId.optional(),
});
export const RevokeKeyInput = z.strictObject({
  keyId: KeyId,
  reason: RevokeReason,
  expectedRevision: z.int().positive().optional(),
  siteScope: z.array(z.string()).nullable().optional(),
  cid: CorrelationId.optional(),
});

type Refusal = ReturnType<typeof refused<OutcomeCode>>;

/** Checks an input; undefined when valid, else the refusal to return. */
export function check(schema: z.ZodType, input: unknown, code: OutcomeCode = 'INVALID_REQUEST'): Refusal | undefined {
  const r = schema.safeParse(input);
  return r.success ? undefined : refused(code, summarizeIssues(r.error));
}

/** An issue input once parsed: wire-valid ids, and the schedule as a Schedule. */
export type ParsedIssueKeyInput = Omit<z.infer<typeof IssueKeyInput>, 'schedule'> & { readonly schedule: Schedule | null };

/**
 * Parses an issue input once: the schema, then the credential's format for
 * its type and the schedule. The parsed value, or the refusal to return.
 */
export function parseIssue(input: unknown): { ok: true; value: ParsedIssueKeyInput } | { ok: false; refusal: Refusal } {
  const r = IssueKeyInput.safeParse(input);
  if (!r.success) return { ok: false, refusal: refused('INVALID_REQUEST', summarizeIssues(r.error)) };
  if ('value' in r.data.credential) {
    const cred = check(PresentedCredential, r.data.credential, 'INVALID_CREDENTIAL');
    if (cred) return { ok: false, refusal: cred };
  }
  if (r.data.schedule === undefined || r.data.schedule === null) return { ok: true, value: { ...r.data, schedule: null } };
  const s = Schedule.safeParse(r.data.schedule);
  if (!s.success) return { ok: false, refusal: refused('INVALID_SCHEDULE', summarizeIssues(s.error)) };
  return { ok: true, value: { ...r.data, schedule: s.data } };
}
