import * as z from 'zod';
import { onDemand, seconds } from '../../http/objects';
import { USAGE_KINDS } from '../../db/schema';
import { RUN_STATUSES } from '../../db/run-statuses';

/** Usage as the API answers it (see http/objects.ts). */

const usageResult = onDemand(() =>
  z.strictObject({
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
  }),
);

/** GET /v1/usage/runs: runs counted by status and by their last_error's code (null: none). */
const runUsageResult = onDemand(() =>
  z.strictObject({
    object: z.literal('usage.runs.result'),
    status: z.enum(RUN_STATUSES),
    error_code: z.string().nullable(),
    num_runs: z.int(),
  }),
);

/** Buckets of time, each with its results. */
const pageOfBuckets = <Result extends z.ZodType>(result: Result) =>
  z.strictObject({
    object: z.literal('page'),
    data: z.array(
      z.strictObject({
        object: z.literal('bucket'),
        start_time: seconds,
        end_time: seconds,
        results: z.array(result),
      }),
    ),
    has_more: z.boolean(),
    next_page: z.string().nullable(),
  });

/** GET /v1/usage: buckets of time, each with its results by the groups asked for. */
export const usagePage = onDemand(() => pageOfBuckets(usageResult()).meta({ id: 'UsagePage' }));
export const runUsagePage = onDemand(() => pageOfBuckets(runUsageResult()).meta({ id: 'RunUsagePage' }));

export type UsagePage = z.infer<ReturnType<typeof usagePage>>;
export type UsageResult = z.infer<ReturnType<typeof usageResult>>;
export type RunUsagePage = z.infer<ReturnType<typeof runUsagePage>>;
export type RunUsageResult = z.infer<ReturnType<typeof runUsageResult>>;
/** A page of buckets of `Result`. */
export interface Page<Result> {
  object: 'page';
  data: { object: 'bucket'; start_time: number; end_time: number; results: Result[] }[];
  has_more: boolean;
  next_page: string | null;
}
