import type { z } from 'zod';
import { summarizeIssues } from './issues.js';
import { MAX_MESSAGE_BYTES } from './messages.js';

export { summarizeIssues };

export type ParseCode = 'TOO_LARGE' | 'MALFORMED' | 'SCHEMA_INVALID';
export type Parsed<T> =
  { readonly ok: true; readonly value: T } | { readonly ok: false; readonly code: ParseCode; readonly detail: string };

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/** Bytes (or a string) to text, refusing oversize input before decoding it and invalid UTF-8. Never throws. */
export function decodeText(input: unknown, maxBytes = MAX_MESSAGE_BYTES): Parsed<string> {
  if (typeof input === 'string') {
    if (Buffer.byteLength(input, 'utf8') > maxBytes) return { ok: false, code: 'TOO_LARGE', detail: `over ${maxBytes} bytes` };
    return { ok: true, value: input };
  }
  if (!(input instanceof Uint8Array)) return { ok: false, code: 'MALFORMED', detail: 'not bytes' };
  if (input.byteLength > maxBytes) return { ok: false, code: 'TOO_LARGE', detail: `${input.byteLength} > ${maxBytes} bytes` };
  try {
    return { ok: true, value: utf8.decode(input) };
  } catch {
    return { ok: false, code: 'MALFORMED', detail: 'invalid UTF-8' };
  }
}

/** Parses JSON text without throwing (deeply nested input included). */
export function parseJson(text: string): Parsed<unknown> {
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (e) {
    return { ok: false, code: 'MALFORMED', detail: e instanceof Error ? e.message.slice(0, 200) : 'bad JSON' };
  }
}

/**
 * The one way a plain JSON MQTT payload (lock channels, presence) is read:
 * size check, UTF-8, JSON, schema. Never throws.
 */
export function parsePayload<S extends z.ZodType>(schema: S, input: unknown, maxBytes = MAX_MESSAGE_BYTES): Parsed<z.infer<S>> {
  const text = decodeText(input, maxBytes);
  if (!text.ok) return text;
  const json = parseJson(text.value);
  if (!json.ok) return json;
  const result = schema.safeParse(json.value);
  if (!result.success) return { ok: false, code: 'SCHEMA_INVALID', detail: summarizeIssues(result.error) };
  return { ok: true, value: result.data };
}
