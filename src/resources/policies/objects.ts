import * as z from 'zod';
import { POLICY_STATUSES, POLICY_TYPES, POLICY_UNITS } from '../../db/schema';

/** Rate-limit policies as the API answers them (see http/objects.ts). */

export const policyObject = z
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
  .meta({ id: 'Policy' });

/** GET /v1/policies/rate-limits: one page of policies, and how many match in all. */
export const policyList = z.strictObject({ object: z.literal('list'), data: z.array(policyObject), total: z.int() });

/** POST /v1/policies/rate-limits: the new policy's id. */
export const createdPolicy = z.strictObject({ id: z.string(), object: z.literal('policy_usage_limits') });

export type PolicyObject = z.infer<typeof policyObject>;
