import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { installToBase64 } from '../src/base64-polyfill.js';

/**
 * The `toBase64` jose encodes with (base64-polyfill.ts): RFC 4648's test
 * vectors in both alphabets, padded and not; any bytes (and any view into a
 * larger buffer) round-trip through Buffer's decoder; bad receivers and
 * options are TypeErrors, as the standard method's are.
 */
type WithToBase64 = Uint8Array & { toBase64(o?: { alphabet?: string; omitPadding?: boolean }): string };
const b = (s: string) => new Uint8Array(Buffer.from(s, 'latin1')) as WithToBase64;

describe('Uint8Array.prototype.toBase64', () => {
  installToBase64();

  it('encodes the RFC 4648 test vectors, padded unless told not to', () => {
    const vectors: [string, string][] = [
      ['', ''],
      ['f', 'Zg=='],
      ['fo', 'Zm8='],
      ['foo', 'Zm9v'],
      ['foob', 'Zm9vYg=='],
      ['fooba', 'Zm9vYmE='],
      ['foobar', 'Zm9vYmFy'],
    ];
    for (const [plain, encoded] of vectors) {
      expect(b(plain).toBase64()).toBe(encoded);
      expect(b(plain).toBase64({ alphabet: 'base64url' })).toBe(encoded);
      expect(b(plain).toBase64({ omitPadding: true })).toBe(encoded.replace(/=/g, ''));
      expect(b(plain).toBase64({ alphabet: 'base64url', omitPadding: true })).toBe(encoded.replace(/=/g, ''));
    }
    // the two alphabets differ in their last two characters
    const high = new Uint8Array([0xfb, 0xff, 0xbf]) as WithToBase64;
    expect(high.toBase64()).toBe('+/+/');
    expect(high.toBase64({ alphabet: 'base64url' })).toBe('-_-_');
  });

  it('round-trips any bytes, also a view into a larger buffer', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.nat(16), fc.nat(16), (bytes, before, after) => {
        const backing = new Uint8Array(before + bytes.length + after);
        backing.set(bytes, before);
        const view = backing.subarray(before, before + bytes.length) as WithToBase64;
        const url = view.toBase64({ alphabet: 'base64url', omitPadding: true });
        expect(url).toMatch(/^[A-Za-z0-9_-]*$/);
        expect(new Uint8Array(Buffer.from(url, 'base64url'))).toEqual(bytes);
        const std = view.toBase64();
        expect(std.length % 4).toBe(0);
        expect(new Uint8Array(Buffer.from(std, 'base64'))).toEqual(bytes);
      }),
    );
  });

  it('refuses a receiver that is not a Uint8Array, and options it does not know', () => {
    const toBase64 = (Uint8Array.prototype as WithToBase64).toBase64;
    expect(() => toBase64.call(new Uint16Array(2) as never)).toThrow(TypeError);
    expect(() => b('x').toBase64({ alphabet: 'hex' })).toThrow(TypeError);
    expect(() => b('x').toBase64(42 as never)).toThrow(TypeError);
  });
});
