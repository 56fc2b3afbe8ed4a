/**
 * Stripe's v1 request encoding: `application/x-www-form-urlencoded` with
 * bracket notation (`metadata[purpose]=stay`, `payment_method_types[0]=card`,
 * `expand[]=latest_charge`), the same shape stripe-node's `queryStringifyRequestData`
 * writes for bodies and for GET query strings. Decoded once at the boundary,
 * then validated by the route's zod schema.
 */

export type FormValue = string | FormValue[] | { [key: string]: FormValue };
export type Form = { [key: string]: FormValue };

/** Splits `a[b][0]` into `['a', 'b', '0']`; `a[]` ends in `''` (append). */
function pathOf(key: string): string[] {
  const open = key.indexOf('[');
  if (open <= 0) return [key];
  const parts = [key.slice(0, open)];
  const re = /\[([^\]]*)\]/g;
  for (let m = re.exec(key.slice(open)); m; m = re.exec(key.slice(open))) parts.push(m[1] ?? '');
  return parts;
}

function assign(target: Form, path: string[], value: string): void {
  let node: Form = target;
  for (let i = 0; i < path.length; i++) {
    const seg = path[i] ?? '';
    const last = i === path.length - 1;
    if (last) {
      if (seg === '') {
        // `a[]=x`: the parent was created as an object keyed by position
        node[String(Object.keys(node).length)] = value;
      } else {
        node[seg] = value;
      }
      return;
    }
    const next = node[seg];
    if (next === undefined || typeof next === 'string' || Array.isArray(next)) {
      const fresh: Form = {};
      node[seg] = fresh;
      node = fresh;
    } else {
      node = next;
    }
  }
}

/** Objects whose keys are exactly 0..n-1 become arrays (that is how Stripe reads `x[0]`/`x[]`). */
function arraysOf(value: FormValue): FormValue {
  if (typeof value === 'string' || Array.isArray(value)) return value;
  const keys = Object.keys(value);
  const out: Form = {};
  for (const k of keys) out[k] = arraysOf(value[k] ?? '');
  if (keys.length > 0 && keys.every((k, i) => k === String(i))) return keys.map((k) => out[k] ?? '');
  return out;
}

export function decodeForm(text: string): Form {
  const root: Form = {};
  for (const [key, value] of new URLSearchParams(text)) assign(root, pathOf(key), value);
  const decoded = arraysOf(root);
  return typeof decoded === 'string' || Array.isArray(decoded) ? {} : decoded;
}

/** A stable text of decoded parameters, for comparing a replay with the original request. */
export function fingerprint(method: string, path: string, form: Form): string {
  const canon = (v: FormValue): unknown => {
    if (typeof v === 'string') return v;
    if (Array.isArray(v)) return v.map(canon);
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, canon(v[k] ?? '')]),
    );
  };
  return JSON.stringify([method, path, canon(form)]);
}
