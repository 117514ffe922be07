import * as z from 'zod';
import { METADATA_LIMITS } from '../lib/metadata';

/**
 * Building blocks shared by the request schemas, with the bounds the API documents (README).
 */

/** A non-negative integer in a query string: digits only, no sign, exponent or spaces. */
export const queryInteger = (options: { min: number; max: number }) =>
  z
    .string()
    .regex(/^\d{1,15}$/, { error: 'expected a non-negative integer' })
    .transform(Number)
    .pipe(z.number().int().min(options.min).max(options.max));

export const metadataSchema = z
  .record(z.string().max(METADATA_LIMITS.keyLength), z.string().max(METADATA_LIMITS.valueLength))
  .refine((value) => Object.keys(value).length <= METADATA_LIMITS.pairs, {
    error: `Metadata can have at most ${METADATA_LIMITS.pairs} key-value pairs.`,
  });

/** A UUID in its canonical hyphenated form, any version. */
export const uuidString = z
  .string()
  .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, { error: 'expected a UUID.' });

/** OpenAI's cursor pagination: `limit`, `order`, and the ids `after` / `before`. */
export const cursorListQuery = z.strictObject({
  limit: queryInteger({ min: 1, max: 100 }).default(20),
  order: z.enum(['asc', 'desc']).default('desc'),
  after: z.string().min(1).max(256).optional(),
  before: z.string().min(1).max(256).optional(),
});
export type CursorListQuery = z.infer<typeof cursorListQuery>;

/**
 * A query parameter that names values of `known`, once or repeated (the query gives one value as a
 * string, several as an array): the known values, or an unknown one refused naming it and the
 * values there are (`include[]`).
 */
export function knownValues<const Known extends readonly string[]>(name: string, known: Known) {
  const isKnown = (value: string): value is Known[number] => known.includes(value);
  return z.union([z.string(), z.array(z.string()).max(16)]).transform((value, ctx) => {
    const values = Array.isArray(value) ? value : [value];
    const unknown = values.find((item) => !isKnown(item));
    if (unknown !== undefined) {
      ctx.addIssue({
        code: 'custom',
        message: `Invalid value for '${name}': '${unknown.slice(0, 100)}' is not supported. Supported values: ${known.join(', ')}.`,
      });
      return z.NEVER;
    }
    return values.filter(isKnown);
  });
}
