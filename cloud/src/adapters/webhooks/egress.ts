import { promises as dns } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/**
 * The SSRF guard of webhooks (docs/api.md "Webhooks"): a webhook URL may only
 * reach public addresses, so a manager token cannot make the cloud call its
 * own metadata service, localhost admin ports or the database's network.
 * Checked at registration (the URL and every address its host resolves to)
 * and again at delivery, on the address actually connected to (`lookup` hook),
 * because DNS can change in between (rebinding).
 */

/** Why an address is not public. Ranges from the IANA IPv4/IPv6 special-purpose address registries. */
export type AddressClass =
  | 'public'
  | 'unspecified'
  | 'loopback'
  | 'broadcast'
  | 'benchmarking'
  | 'documentation'
  | 'private'
  | 'shared (CGNAT)'
  | 'link-local'
  | 'multicast'
  | 'reserved';
type Internal = Exclude<AddressClass, 'public'>;

// Checked in this order, so a narrower class wins over 'reserved' (255.255.255.255 is broadcast, not 240/4).
const RANGES: readonly (readonly [Internal, readonly (readonly [string, number])[]])[] = [
  [
    'unspecified',
    [
      ['0.0.0.0', 8],
      ['::', 128],
    ],
  ],
  [
    'loopback',
    [
      ['127.0.0.0', 8],
      ['::1', 128],
    ],
  ],
  ['broadcast', [['255.255.255.255', 32]]],
  [
    'benchmarking',
    [
      ['198.18.0.0', 15],
      ['2001:2::', 48],
    ],
  ],
  [
    'documentation',
    [
      ['192.0.2.0', 24],
      ['198.51.100.0', 24],
      ['203.0.113.0', 24],
      ['2001:db8::', 32],
      ['3fff::', 20],
    ],
  ],
  // fec0::/10 is the deprecated site-local range: private in effect
  [
    'private',
    [
      ['10.0.0.0', 8],
      ['172.16.0.0', 12],
      ['192.168.0.0', 16],
      ['fc00::', 7],
      ['fec0::', 10],
    ],
  ],
  ['shared (CGNAT)', [['100.64.0.0', 10]]],
  [
    'link-local',
    [
      ['169.254.0.0', 16],
      ['fe80::', 10],
    ],
  ],
  [
    'multicast',
    [
      ['224.0.0.0', 4],
      ['ff00::', 8],
    ],
  ],
  // 192.0.0.0/24 IETF protocol assignments, 192.88.99.0/24 old 6to4 relays, 240/4 future use;
  // 64:ff9b:1::/48 local-use NAT64, 100::/64 discard, 2001::/23 IETF protocol assignments (Teredo among them)
  [
    'reserved',
    [
      ['192.0.0.0', 24],
      ['192.88.99.0', 24],
      ['240.0.0.0', 4],
      ['64:ff9b:1::', 48],
      ['100::', 64],
      ['2001::', 23],
    ],
  ],
];
const LISTS: readonly (readonly [Internal, BlockList])[] = RANGES.map(([cls, ranges]) => {
  const list = new BlockList();
  for (const [net, prefix] of ranges) list.addSubnet(net, prefix, isIP(net) === 4 ? 'ipv4' : 'ipv6');
  return [cls, list] as const;
});
// IPv6 outside 2000::/3 (global unicast) is not routable on the internet, whatever it is
const GLOBAL_UNICAST = new BlockList();
GLOBAL_UNICAST.addSubnet('2000::', 3, 'ipv6');

/** The class of an IP address; anything that is not a valid address is 'reserved' (fail closed). */
export function classifyAddress(address: string): AddressClass {
  const ip = address.replace(/%.*$/, ''); // an IPv6 zone id (fe80::1%eth0)
  const family = isIP(ip);
  if (family === 4) return classify(ip, 'ipv4');
  if (family !== 6) return 'reserved';
  const g = ipv6Groups(ip);
  if (g === undefined) return 'reserved';
  const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  const zeros = (n: number) => g.slice(0, n).every((x) => x === 0);
  // IPv4 embedded in IPv6 is judged by its IPv4 address: mapped ::ffff:a.b.c.d, NAT64 64:ff9b::a.b.c.d, 6to4 2002:aabb:ccdd::
  if (zeros(5) && g[5] === 0xffff) return classify(v4(g[6] ?? 0, g[7] ?? 0), 'ipv4');
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) return classify(v4(g[6] ?? 0, g[7] ?? 0), 'ipv4');
  if (g[0] === 0x2002) return classify(v4(g[1] ?? 0, g[2] ?? 0), 'ipv4');
  // deprecated IPv4-compatible ::a.b.c.d (not :: or ::1): never public
  if (zeros(6) && ((g[6] ?? 0) !== 0 || (g[7] ?? 0) > 1)) {
    const inner = classify(v4(g[6] ?? 0, g[7] ?? 0), 'ipv4');
    return inner === 'public' ? 'reserved' : inner;
  }
  const cls = classify(ip, 'ipv6');
  return cls === 'public' && !GLOBAL_UNICAST.check(ip, 'ipv6') ? 'reserved' : cls;
}

function classify(ip: string, type: 'ipv4' | 'ipv6'): AddressClass {
  for (const [cls, list] of LISTS) if (list.check(ip, type)) return cls;
  return 'public';
}

/** The eight 16-bit groups of a valid IPv6 address (a dotted IPv4 tail becomes the last two). */
function ipv6Groups(ip: string): number[] | undefined {
  let s = ip;
  const tail = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s);
  if (tail) {
    const [a, b, c, d] = tail.slice(1).map(Number) as [number, number, number, number];
    s = `${s.slice(0, tail.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = s.split('::');
  if (halves.length > 2) return undefined;
  const part = (x: string | undefined) => (x ? x.split(':').map((h) => parseInt(h, 16)) : []);
  const head = part(halves[0]);
  const rest = part(halves[1]);
  const fill = halves.length === 2 ? 8 - head.length - rest.length : 0;
  const g = [...head, ...Array<number>(Math.max(fill, 0)).fill(0), ...rest];
  return g.length === 8 && g.every((x) => Number.isInteger(x) && x >= 0 && x <= 0xffff) ? g : undefined;
}

const AN = (cls: Internal) => `${/^[aeiou]/.test(cls) ? 'an' : 'a'} ${cls}`;

export interface EgressPolicy {
  /** Internal addresses and plain http are allowed (the guard is off): closed networks, tests, the demo. */
  readonly allowPrivateNetworks: boolean;
}

export type UrlVerdict =
  | { readonly ok: true; readonly url: URL }
  | { readonly ok: false; readonly code: 'WEBHOOK_URL_FORBIDDEN' | 'WEBHOOK_URL_UNRESOLVABLE'; readonly detail: string };

const forbidden = (detail: string): UrlVerdict => ({ ok: false, code: 'WEBHOOK_URL_FORBIDDEN', detail });

/** The host of a URL as an IP address when it is a literal one (URL keeps IPv6 in brackets), else undefined. */
export function literalAddress(url: URL): string | undefined {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  return isIP(host) === 0 ? undefined : host;
}

/**
 * What can be judged without DNS: an http(s) URL without userinfo; with the
 * guard on, https only and a literal address must be public.
 */
export function checkUrlShape(raw: string, policy: EgressPolicy): UrlVerdict {
  const url = URL.canParse(raw) ? new URL(raw) : null;
  if (url === null || (url.protocol !== 'https:' && url.protocol !== 'http:')) return forbidden('only https URLs are accepted');
  if (url.username !== '' || url.password !== '') return forbidden('the URL must not carry a user name or password');
  if (policy.allowPrivateNetworks) return { ok: true, url };
  const literal = literalAddress(url);
  const cls = literal === undefined ? 'public' : classifyAddress(literal);
  if (cls !== 'public') return forbidden(`the URL points at ${AN(cls)} address`);
  if (url.protocol === 'http:') return forbidden('plain http is refused: use https');
  return { ok: true, url };
}

export interface ResolvedAddress {
  readonly address: string;
  readonly family: number;
}
/** Every address of a host name (the DNS port; tests pass their own). */
export type ResolveAll = (host: string, family?: 0 | 4 | 6) => Promise<readonly ResolvedAddress[]>;
export const resolveAll: ResolveAll = (host, family = 0) => dns.lookup(host, { all: true, family });

const RESOLVE_TIMEOUT_MS = 5_000;

/**
 * Registration check: the URL's shape, then every address its host resolves
 * to must be public (one internal address makes the URL bad). The detail names
 * the address class only, never the resolved address.
 */
export async function checkWebhookUrl(raw: string, policy: EgressPolicy, resolve: ResolveAll = resolveAll): Promise<UrlVerdict> {
  const shape = checkUrlShape(raw, policy);
  if (!shape.ok || policy.allowPrivateNetworks || literalAddress(shape.url) !== undefined) return shape;
  let timer: NodeJS.Timeout | undefined;
  const addresses = await Promise.race([
    resolve(shape.url.hostname),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('DNS timeout')), RESOLVE_TIMEOUT_MS);
    }),
  ])
    .catch(() => [] as const)
    .finally(() => clearTimeout(timer));
  if (addresses.length === 0) return { ok: false, code: 'WEBHOOK_URL_UNRESOLVABLE', detail: 'the host does not resolve' };
  for (const a of addresses) {
    const cls = classifyAddress(a.address);
    if (cls !== 'public') return forbidden(`the host resolves to ${AN(cls)} address`);
  }
  return shape;
}

/** A connection refused by the guard; `code` WEBHOOK_ADDRESS_FORBIDDEN. */
export class EgressRefusedError extends Error {
  readonly code = 'WEBHOOK_ADDRESS_FORBIDDEN';
  constructor(
    readonly addressClass: Internal,
    /** For the server log only; never shown to API clients. */
    readonly address: string,
  ) {
    super(`the host resolves to ${AN(addressClass)} address`);
    this.name = 'EgressRefusedError';
  }
}

/**
 * A `lookup` for node:net / http(s).request: resolves every address of the
 * host and fails the connection with EgressRefusedError, before any socket is
 * opened, if one of them is internal; so the address checked is the address
 * connected to. (Literal IP hosts never reach a lookup: check them first with
 * checkUrlShape.)
 */
export function guardedLookup(resolve: ResolveAll = resolveAll): LookupFunction {
  return (hostname, options, callback) => {
    const family = options.family === 4 || options.family === 'IPv4' ? 4 : options.family === 6 || options.family === 'IPv6' ? 6 : 0;
    resolve(hostname, family).then(
      (addresses) => {
        const bad = addresses.find((a) => classifyAddress(a.address) !== 'public');
        const first = addresses[0];
        // called outside the promise chain, so a throwing callback is not reported as a lookup failure
        process.nextTick(() => {
          if (bad) callback(new EgressRefusedError(classifyAddress(bad.address) as Internal, bad.address), '', 0);
          else if (first === undefined)
            callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }), '', 0);
          else if (options.all)
            callback(
              null,
              addresses.map((a) => ({ address: a.address, family: a.family })),
            );
          else callback(null, first.address, first.family);
        });
      },
      (e: unknown) => process.nextTick(() => callback(e instanceof Error ? e : new Error(String(e)), '', 0)),
    );
  };
}
