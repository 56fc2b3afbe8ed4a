/**
 * The sites a caller may see (an API token's site scope); null = every site.
 * Repositories apply it in SQL (`$1::text[] IS NULL OR site_id = ANY($1)`),
 * so a row of another site is simply not found: the API answers 404, never 403.
 */
export type SiteScope = readonly string[] | null;

/** The scope as a query parameter (a plain array or NULL). */
export const scopeParam = (s: SiteScope | undefined): string[] | null => (s === null || s === undefined ? null : [...s]);

/**
 * The tail every time-window list query ends with, in this order: `from`
 * (inclusive), `to` (exclusive), the cursor's two parts, and `limit + 1` (the
 * extra row only says another page exists; see `pageOf`).
 */
export const timePageParams = (f: {
  readonly from?: number | undefined;
  readonly to?: number | undefined;
  readonly cursor: readonly [number, string | number] | null;
  readonly limit: number;
}): (number | string | null)[] => [f.from ?? null, f.to ?? null, f.cursor?.[0] ?? null, f.cursor?.[1] ?? null, f.limit + 1];
