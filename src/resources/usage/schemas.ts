import * as z from 'zod';
import { queryInteger } from '../../http/schemas';

/** What usage can be grouped by, beside the time bucket. */
export const USAGE_GROUPS = ['workspace_id', 'api_key_id', 'virtual_key', 'model', 'kind'] as const;
export type UsageGroup = (typeof USAGE_GROUPS)[number];

/** Buckets per page: OpenAI's usage API's defaults and maxima. */
export const BUCKET_LIMITS = { '1d': { default: 7, max: 31 }, '1h': { default: 24, max: 168 } } as const;
export type BucketWidth = keyof typeof BUCKET_LIMITS;

/**
 * GET /v1/usage, after OpenAI's organisation usage API: `start_time` (Unix seconds, inclusive;
 * default: the page's first bucket counting back from now), `end_time` (exclusive), `bucket_width`
 * `1d` (default, UTC days) or `1h`, `group_by` (comma-separated), `limit` (buckets), `page` (the
 * `next_page` of the previous answer), `workspace_id` (organisation keys: one workspace, by id or
 * slug; default all of the organisation's).
 */
const range = {
  start_time: queryInteger({ min: 0, max: 253_402_300_799 }).optional(),
  end_time: queryInteger({ min: 1, max: 253_402_300_800 }).optional(),
  bucket_width: z.enum(['1d', '1h']).default('1d'),
  limit: queryInteger({ min: 1, max: 168 }).optional(),
  page: z
    .string()
    .regex(/^\d{1,12}$/, { error: 'expected the next_page of a previous answer' })
    .optional(),
  workspace_id: z.string().min(1).max(255).optional(),
};

/** A limit within the bucket width's, and an end after the start. */
function checkRange(
  query: {
    bucket_width: BucketWidth;
    limit?: number | undefined;
    start_time?: number | undefined;
    end_time?: number | undefined;
  },
  ctx: z.RefinementCtx,
): void {
  const limits = BUCKET_LIMITS[query.bucket_width];
  if (query.limit !== undefined && query.limit > limits.max) {
    ctx.addIssue({
      code: 'custom',
      path: ['limit'],
      message: `at most ${limits.max} buckets of ${query.bucket_width}`,
    });
  }
  if (query.start_time !== undefined && query.end_time !== undefined && query.end_time <= query.start_time) {
    ctx.addIssue({ code: 'custom', path: ['end_time'], message: 'end_time must be after start_time' });
  }
}

export const usageQuery = z
  .strictObject({
    ...range,
    group_by: z
      .string()
      .max(200)
      .transform((text) =>
        text
          .split(',')
          .map((group) => group.trim())
          .filter(Boolean),
      )
      .pipe(
        z
          .array(z.enum(USAGE_GROUPS))
          .refine((groups) => new Set(groups).size === groups.length, { error: 'a group is named twice' }),
      )
      .optional(),
  })
  .superRefine(checkRange);
export type UsageQuery = z.infer<typeof usageQuery>;

/**
 * GET /v1/usage/runs (a gateway extension): runs by status per bucket of their creation, with the
 * range, pages and scope of GET /v1/usage.
 */
export const runUsageQuery = z.strictObject(range).superRefine(checkRange);
