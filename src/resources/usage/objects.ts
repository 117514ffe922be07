import * as z from 'zod';
import { seconds } from '../../http/objects';
import { USAGE_KINDS } from '../../db/schema';

/** Usage as the API answers it (see http/objects.ts). */

const usageResult = z.strictObject({
  object: z.literal('usage.result'),
  input_tokens: z.int(),
  output_tokens: z.int(),
  total_tokens: z.int(),
  num_requests: z.int(),
  workspace_id: z.string().nullable(),
  api_key_id: z.string().nullable(),
  /** The virtual key's slug. */
  virtual_key: z.string().nullable(),
  model: z.string().nullable(),
  kind: z.enum(USAGE_KINDS).nullable(),
});

/** GET /v1/usage: buckets of time, each with its results by the groups asked for. */
export const usagePage = z
  .strictObject({
    object: z.literal('page'),
    data: z.array(
      z.strictObject({
        object: z.literal('bucket'),
        start_time: seconds,
        end_time: seconds,
        results: z.array(usageResult),
      }),
    ),
    has_more: z.boolean(),
    next_page: z.string().nullable(),
  })
  .meta({ id: 'UsagePage' });

export type UsagePage = z.infer<typeof usagePage>;
export type UsageResult = z.infer<typeof usageResult>;
