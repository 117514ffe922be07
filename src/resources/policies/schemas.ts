import * as z from 'zod';
import { ATTRIBUTE_KEYS_DESCRIPTION, isAttributeKey } from '../../ratelimit/vocabulary';
import { queryInteger, uuidString } from '../../http/schemas';
import { POLICY_STATUSES, POLICY_TYPES, POLICY_UNITS } from '../../db/schema';

/**
 * Rate-limit policies: list and create, plus GET, PUT and DELETE of one policy.
 */

/** Bounds of our own, chosen so that a policy stays cheap to match. */
export const POLICY_LIMITS = {
  name: 255,
  conditions: 32,
  groupBy: 8,
  conditionValue: 512,
  /** Beyond 2^53 a counter could no longer tell value from value + 1. */
  value: Number.MAX_SAFE_INTEGER,
} as const;

const attributeKey = z.string().refine(isAttributeKey, {
  error: (issue) => `Unknown key ${JSON.stringify(issue.input)}: allowed keys are ${ATTRIBUTE_KEYS_DESCRIPTION}.`,
});

const condition = z.strictObject({
  key: attributeKey,
  /** A string; `*` matches any present value. */
  value: z.string().min(1).max(POLICY_LIMITS.conditionValue),
});

const groupKey = z.strictObject({ key: attributeKey });

/** No key twice: two conditions on one key could only both hold with `*`, a grouping twice is noise. */
const distinctKeys = (what: string) => (items: { key: string }[], ctx: z.RefinementCtx) => {
  const seen = new Map<string, number>();
  items.forEach((item, index) => {
    const first = seen.get(item.key);
    if (first !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: [index, 'key'],
        message: `Key '${item.key}' appears twice in ${what} (items ${first} and ${index}).`,
      });
    }
    seen.set(item.key, index);
  });
};

const conditions = z.array(condition).min(1).max(POLICY_LIMITS.conditions).superRefine(distinctKeys('conditions'));
const groupBy = z.array(groupKey).min(1).max(POLICY_LIMITS.groupBy).superRefine(distinctKeys('group_by'));

const value = z.number().positive().max(POLICY_LIMITS.value);
const name = z.string().max(POLICY_LIMITS.name);

export const createPolicyBody = z.strictObject({
  conditions,
  group_by: groupBy,
  type: z.enum(POLICY_TYPES),
  unit: z.enum(POLICY_UNITS),
  value,
  name: name.optional(),
  workspace_id: z.string().min(1).max(255).optional(),
  organisation_id: uuidString.optional(),
});
export type CreatePolicyBody = z.infer<typeof createPolicyBody>;

export const updatePolicyBody = z
  .strictObject({
    name: name.optional(),
    value: value.optional(),
    unit: z.enum(POLICY_UNITS).optional(),
    conditions: conditions.optional(),
    group_by: groupBy.optional(),
  })
  .refine((body) => Object.keys(body).length > 0, {
    error: 'Send at least one of name, value, unit, conditions, group_by.',
  });
export type UpdatePolicyBody = z.infer<typeof updatePolicyBody>;

export const MAX_PAGE_SIZE = 1000;
export const DEFAULT_PAGE_SIZE = 50;

export const listPoliciesQuery = z.strictObject({
  workspace_id: z.string().min(1).max(255).optional(),
  status: z.enum(POLICY_STATUSES).default('active'),
  type: z.enum(POLICY_TYPES).optional(),
  unit: z.enum(POLICY_UNITS).optional(),
  page_size: queryInteger({ min: 0, max: MAX_PAGE_SIZE }).default(DEFAULT_PAGE_SIZE),
  current_page: queryInteger({ min: 0, max: 1_000_000_000 }).default(0),
});
export type ListPoliciesQuery = z.infer<typeof listPoliciesQuery>;

/** The most used groups GET …/counters answers at most. */
export const MAX_COUNTER_GROUPS = 100;

export const policyCountersQuery = z.strictObject({
  limit: queryInteger({ min: 1, max: MAX_COUNTER_GROUPS }).default(20),
});
