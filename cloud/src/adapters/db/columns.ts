import { z } from 'zod';

/**
 * bigint (int8) columns and aggregates (count, COALESCE over int8): a number
 * from both drivers for plain columns, but a string from some expressions, so
 * they are coerced, once, where the row is parsed.
 */
export const Int8 = z.coerce.number().int();
