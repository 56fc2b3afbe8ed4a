/**
 * `Uint8Array.prototype.toBase64` (the TC39 "Uint8Array to/from base64"
 * method, native in newer runtimes) for Node 20, backed by Buffer's native
 * encoder.
 *
 * Why: jose 6 is written against Web APIs; on a runtime without
 * `toBase64` it encodes through `String.fromCharCode` and `btoa`, and the
 * gateway signs its uplink batches (up to 64 KiB) with it: 1.9 ms of CPU per
 * 26 KiB batch on this machine, 0.4 ms with this, on the thread that decides
 * at the doors. Only the encoder is supplied: it is exact (Buffer's base64 and
 * base64url alphabets, padding as the options ask), while decoding — which
 * takes untrusted input — stays jose's own strict path.
 *
 * Installed once, when this module is first imported (signing.ts imports
 * it); a runtime that has the method keeps its own.
 */
interface ToBase64Options {
  alphabet?: 'base64' | 'base64url';
  omitPadding?: boolean;
}

function toBase64(this: unknown, options?: ToBase64Options): string {
  if (!(this instanceof Uint8Array)) throw new TypeError('toBase64 called on something that is not a Uint8Array');
  if (options !== undefined && (typeof options !== 'object' || options === null)) throw new TypeError('options must be an object');
  const alphabet = options?.alphabet ?? 'base64';
  if (alphabet !== 'base64' && alphabet !== 'base64url') throw new TypeError(`unknown base64 alphabet: ${String(alphabet)}`);
  const omitPadding = Boolean(options?.omitPadding);
  const bytes = Buffer.from(this.buffer, this.byteOffset, this.byteLength);
  // Buffer's base64url never pads and its base64 always does: the options decide
  const text = alphabet === 'base64url' ? bytes.toString('base64url') : bytes.toString('base64').replace(/=+$/, '');
  return omitPadding ? text : text.padEnd(Math.ceil(text.length / 4) * 4, '=');
}

export function installToBase64(): void {
  if (typeof (Uint8Array.prototype as { toBase64?: unknown }).toBase64 === 'function') return;
  Object.defineProperty(Uint8Array.prototype, 'toBase64', { value: toBase64, writable: true, configurable: true, enumerable: false });
}

installToBase64();
