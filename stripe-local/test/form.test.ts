import { describe, expect, it } from 'vitest';
import { decodeForm, fingerprint } from '../src/form.js';

describe('Stripe form decoding (bracket notation)', () => {
  it('nests objects and turns indexed or appended keys into arrays', () => {
    const body =
      'amount=1000&metadata[purpose]=stay_balance&metadata[subject_id]=st_1&allowed_payment_method_types[0]=card&allowed_payment_method_types[1]=konbini&expand[]=latest_charge&automatic_payment_methods[enabled]=true';
    expect(decodeForm(body)).toEqual({
      amount: '1000',
      metadata: { purpose: 'stay_balance', subject_id: 'st_1' },
      allowed_payment_method_types: ['card', 'konbini'],
      expand: ['latest_charge'],
      automatic_payment_methods: { enabled: 'true' },
    });
  });

  it('decodes percent-escapes and +, and an empty body to {}', () => {
    expect(decodeForm('description=Room+101%20%E6%9D%B1')).toEqual({ description: 'Room 101 東' });
    expect(decodeForm('')).toEqual({});
  });

  it('fingerprints ignore parameter order but not values, method or path', () => {
    const a = fingerprint('POST', '/v1/refunds', decodeForm('amount=1&metadata[a]=1&metadata[b]=2'));
    expect(fingerprint('POST', '/v1/refunds', decodeForm('metadata[b]=2&amount=1&metadata[a]=1'))).toBe(a);
    expect(fingerprint('POST', '/v1/refunds', decodeForm('amount=2&metadata[a]=1&metadata[b]=2'))).not.toBe(a);
    expect(fingerprint('POST', '/v1/payment_intents', decodeForm('amount=1&metadata[a]=1&metadata[b]=2'))).not.toBe(a);
  });
});
