import { networkInterfaces } from 'node:os';

/**
 * The Host header check against DNS rebinding: a page on a name the attacker
 * controls, re-pointed at this gateway's address, makes the victim's browser
 * send requests that carry the attacker's name in Host. Only configured
 * names are answered. An entry `name` accepts any port, `name:port` only that
 * port; names compare without case.
 */
export interface HostRule {
  readonly name: string;
  /** null: any port. */
  readonly port: number | null;
}

/** `Host` as `{ name, port }` (port null when absent); null when it is not a host at all. */
export function parseHost(h: string): HostRule | null {
  const m = /^(\[[0-9a-f:.]+\]|[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)(?::(\d{1,5}))?$/.exec(h.toLowerCase());
  if (m === null) return null;
  const port = m[2] === undefined ? null : Number(m[2]);
  if (port !== null && port > 65535) return null;
  return { name: m[1]!, port };
}

const WILDCARD = new Set(['0.0.0.0', '::', '[::]', '']);

/** `host` as it stands in a Host header: IPv6 in brackets. */
const bracketed = (host: string): string => (host.includes(':') && !host.startsWith('[') ? `[${host}]` : host).toLowerCase();

/**
 * The default: the listen address, localhost, 127.0.0.1 and [::1], each with
 * `port` (null when not listening: `inject` in tests). Listening on every
 * interface, each interface's address is the listen address.
 */
export function defaultHostRules(listenHost: string, port: number | null): HostRule[] {
  const names = new Set(['localhost', '127.0.0.1', '[::1]']);
  if (WILDCARD.has(listenHost)) {
    for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) names.add(bracketed(a.address.replace(/%.*$/, '')));
  } else names.add(bracketed(listenHost));
  return [...names].map((name) => ({ name, port }));
}

export function hostAllowed(rules: readonly HostRule[], header: string | undefined): boolean {
  if (header === undefined) return false;
  const h = parseHost(header);
  if (h === null) return false;
  return rules.some((r) => r.name === h.name && (r.port === null || r.port === (h.port ?? 80)));
}

/** Config entries (`name` or `name:port`, validated by the config schema) as rules. */
export const hostRules = (entries: readonly string[]): HostRule[] =>
  entries.map((e) => parseHost(e)).filter((r): r is HostRule => r !== null);
