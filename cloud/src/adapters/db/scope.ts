/**
 * The sites a caller may see (an API token's site scope); null = every site.
 * Repositories apply it in SQL (`$1::text[] IS NULL OR site_id = ANY($1)`),
 * so a row of another site is simply not found: the API answers 404, never 403.
 */
export type SiteScope = readonly string[] | null;

/** The scope as a query parameter (a plain array or NULL). */
export const scopeParam = (s: SiteScope | undefined): string[] | null => (s === null || s === undefined ? null : [...s]);
