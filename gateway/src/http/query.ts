import { decodeCursor } from '@tobira/shared';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';

/** Query, params and body parsing shared by the staff routes: strings in, typed values out; a bad one is a 400 (app.ts's error handler). */

export const Ms = z
  .string()
  .regex(/^\d{1,15}$/, 'epoch ms (digits)')
  .transform(Number);
export const Limit = z
  .string()
  .regex(/^\d{1,3}$/, 'an integer 1..500')
  .transform(Number)
  .refine((n) => n >= 1 && n <= 500, 'an integer 1..500')
  .default(100);
export const Cursor = z.string().min(1).max(400);
export const Code = z.string().regex(/^[A-Z_]{1,64}$/, 'a code: A-Z and _');
export const Id = z.string().min(1).max(128);
export const Bool = z.enum(['true', 'false']).transform((v) => v === 'true');

/** The filters of every time-ordered list. */
export const TimePage = { code: Code.optional(), since: Ms.optional(), until: Ms.optional(), cursor: Cursor.optional(), limit: Limit };
export const NoQuery = z.strictObject({});

export const issues = (e: z.ZodError): string =>
  e.issues
    .slice(0, 5)
    .map((i) => `${i.path.join('.') || 'query'}: ${i.message}`)
    .join('; ');

/** A malformed query or cursor: answered 400 BAD_REQUEST with its detail. */
export class BadQuery extends Error {}

export function query<S extends z.ZodType>(schema: S, req: FastifyRequest): z.infer<S> {
  const r = schema.safeParse(req.query ?? {});
  if (!r.success) throw new BadQuery(issues(r.error));
  return r.data;
}

export function cursorOf<S extends z.ZodType>(schema: S, c: string | undefined): z.infer<S> | null {
  const d = decodeCursor(schema, c);
  if (d === 'bad') throw new BadQuery('cursor: not a cursor of this list');
  return d;
}
