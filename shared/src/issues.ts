import type { z } from 'zod';

/** A zod error in one short line (its first five issues, at most 500 characters), for log lines and refusal details. */
export function summarizeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`)
    .join('; ')
    .slice(0, 500);
}
