import * as z from 'zod';

/**
 * POST /v1/moderations, checked only as far as the gateway reads it: the input its reservation is
 * sized by (a string, strings, or text and image parts) and the model, which the provider defaults
 * (MODERATION_MODEL) when it is absent. The rest goes on as sent.
 */
export const createModerationBody = z
  .looseObject({
    input: z.union([
      z.string(),
      z.array(z.string()).min(1),
      z.array(z.looseObject({ type: z.enum(['text', 'image_url']) })).min(1),
    ]),
    model: z.string().min(1).max(256).optional(),
  })
  .meta({ id: 'CreateModerationRequest' });

export type CreateModerationBody = z.infer<typeof createModerationBody>;
