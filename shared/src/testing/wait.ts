/**
 * Polls `cond` until it yields a value (anything but undefined, null or
 * false) and answers that value; after `timeoutMs` it throws an error that
 * names `what` was awaited. A wait for an effect, not a timing assertion: the
 * default stays under the suite's test timeout (vitest.config.ts, 30 s), so a
 * failed wait reports what it waited for rather than a bare test timeout.
 */
export async function waitFor<T>(
  cond: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  what: string,
  timeoutMs = 20_000,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v !== undefined && v !== null && v !== false) return v;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
