import * as z from 'zod';
import { POLICY_STATUSES, POLICY_TYPES, POLICY_UNITS } from '../../db/schema';
import { onDemand } from '../../http/objects';

/** Rate-limit policies as the API answers them (see http/objects.ts). */

export const policyObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      type: z.enum(POLICY_TYPES),
      unit: z.enum(POLICY_UNITS),
      value: z.int(),
      status: z.enum(POLICY_STATUSES),
      workspace_id: z.string(),
      organisation_id: z.string(),
      created_at: z.iso.datetime(),
      last_updated_at: z.iso.datetime(),
      name: z.string(),
      conditions: z.array(z.strictObject({ key: z.string(), value: z.string() })),
      group_by: z.array(z.strictObject({ key: z.string() })),
      /** The kind of API key that created it: an organisation's policy is changed only by organisation keys. */
      created_by: z.enum(['organisation', 'workspace']),
    })
    .meta({ id: 'Policy' }),
);

/** GET /v1/policies/rate-limits: one page of policies, and how many match in all. */
export const policyList = onDemand(() =>
  z.strictObject({ object: z.literal('list'), data: z.array(policyObject()), total: z.int() }),
);

/** POST /v1/policies/rate-limits: the new policy's id. */
export const createdPolicy = onDemand(() =>
  z.strictObject({ id: z.string(), object: z.literal('policy_usage_limits') }),
);

/** A counter's group: each group_by key with the request's value (null: absent), or null when hashed. */
const counterGroup = onDemand(() => ({
  group: z.array(z.strictObject({ key: z.string(), value: z.string().nullable() })).nullable(),
  /** Set instead of `group` when the values were too long to keep (over 128 characters together). */
  group_hash: z.string().nullable(),
}));

/** GET /v1/policies/rate-limits/{id}/counters: the current window's counters and recent refusals. */
export const policyCountersObject = onDemand(() =>
  z
    .strictObject({
      object: z.literal('rate_limit_policy.counters'),
      policy_id: z.string(),
      type: z.enum(POLICY_TYPES),
      unit: z.enum(POLICY_UNITS),
      value: z.number(),
      window_start: z.iso.datetime(),
      window_end: z.iso.datetime(),
      /** The `limit` most used groups of the window, most used first. */
      groups: z.array(z.strictObject({ ...counterGroup(), used: z.number() })),
      /** Groups with a counter in the window, `groups` being the first of them. */
      total_groups: z.int(),
      /** The last refusals, newest first (see docs/rate-limits.md for where they are kept). */
      refusals: z.array(
        z.strictObject({
          created_at: z.iso.datetime(),
          ...counterGroup(),
          api_key_id: z.string(),
          /** The key's first characters, as GET /v1/api-keys shows them; null for a key since deleted. */
          api_key_prefix: z.string().nullable(),
          virtual_key: z.string(),
          /** What the request would have added: 1 request, or the tokens its turn would have reserved. */
          requested: z.number(),
          used: z.number(),
          limit: z.number(),
        }),
      ),
    })
    .meta({ id: 'PolicyCounters' }),
);

export type PolicyObject = z.infer<ReturnType<typeof policyObject>>;
export type PolicyCountersObject = z.infer<ReturnType<typeof policyCountersObject>>;
