import * as z from 'zod';
import { onDemand } from '../../http/objects';

/** A moderation as the provider answers it, returned unchanged. */
export const moderationObject = onDemand(() =>
  z
    .looseObject({
      id: z.string(),
      model: z.string(),
      results: z.array(
        z.looseObject({
          flagged: z.boolean(),
          categories: z.record(z.string(), z.boolean()),
          category_scores: z.record(z.string(), z.number()),
        }),
      ),
    })
    .meta({ id: 'CreateModerationResponse' }),
);
