import * as z from 'zod';

/**
 * The attribute filters a search takes (OpenAI's ComparisonFilter, CompoundFilter), bounded: a
 * filter nests at most FILTER_LIMITS.depth levels and holds at most FILTER_LIMITS.comparisons
 * comparisons, so that the SQL built from it (search.ts) stays small whatever a client sends.
 */

export const FILTER_LIMITS = { depth: 5, comparisons: 32, inValues: 100, keyChars: 64, valueChars: 512 } as const;

const scalar = z.union([z.string().max(FILTER_LIMITS.valueChars), z.number(), z.boolean()]);

export const comparisonFilterSchema = z
  .strictObject({
    type: z.enum(['eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in', 'nin']),
    key: z.string().min(1).max(FILTER_LIMITS.keyChars),
    value: z.union([
      scalar,
      z
        .array(z.union([z.string().max(FILTER_LIMITS.valueChars), z.number()]))
        .min(1)
        .max(FILTER_LIMITS.inValues),
    ]),
  })
  .superRefine((filter, ctx) => {
    const list = Array.isArray(filter.value);
    if ((filter.type === 'in' || filter.type === 'nin') !== list) {
      ctx.addIssue({
        code: 'custom',
        path: ['value'],
        message: `A '${filter.type}' filter takes ${list ? 'one value, not a list' : 'a list of values'}.`,
      });
    } else if (['gt', 'gte', 'lt', 'lte'].includes(filter.type) && typeof filter.value === 'boolean') {
      ctx.addIssue({
        code: 'custom',
        path: ['value'],
        message: `A '${filter.type}' filter compares numbers or strings, not booleans.`,
      });
    }
  });
export type ComparisonFilter = z.infer<typeof comparisonFilterSchema>;

export type CompoundFilter = { type: 'and' | 'or'; filters: AttributeFilter[] };
export type AttributeFilter = ComparisonFilter | CompoundFilter;

const compoundFilterSchema: z.ZodType<CompoundFilter> = z.strictObject({
  type: z.enum(['and', 'or']),
  get filters() {
    return z.array(filterShape).min(1).max(FILTER_LIMITS.comparisons);
  },
});

const filterShape: z.ZodType<AttributeFilter> = z.lazy(() => z.union([comparisonFilterSchema, compoundFilterSchema]));

/** Depth and size are checked before the recursive schema runs: a deep input never recurses. */
function filterBounds(value: unknown): string | null {
  let comparisons = 0;
  const stack: [unknown, number][] = [[value, 1]];
  for (let entry = stack.pop(); entry !== undefined; entry = stack.pop()) {
    const [node, depth] = entry;
    if (depth > FILTER_LIMITS.depth) return `must not nest compound filters deeper than ${FILTER_LIMITS.depth} levels.`;
    if (node === null || typeof node !== 'object' || !('filters' in node) || !Array.isArray(node.filters)) {
      if (++comparisons > FILTER_LIMITS.comparisons)
        return `must hold at most ${FILTER_LIMITS.comparisons} comparisons.`;
      continue;
    }
    for (const child of node.filters.slice(0, FILTER_LIMITS.comparisons + 1)) stack.push([child, depth + 1]);
  }
  return null;
}

export const attributeFilterSchema = z
  .unknown()
  .superRefine((value, ctx) => {
    const problem = filterBounds(value);
    if (problem) ctx.addIssue({ code: 'custom', message: problem, abort: true });
  })
  .pipe(filterShape);
