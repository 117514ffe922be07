import * as z from 'zod';
import { onDemand, seconds } from '../../http/objects';
import { metadataSchema } from '../../http/schemas';
import { responseFormatSchema, toolResourcesSchema, toolSchema } from '../../db/json-columns';

/** An assistant as the API answers it (see http/objects.ts). */

export const assistantObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('assistant'),
      created_at: seconds,
      name: z.string().nullable(),
      description: z.string().nullable(),
      model: z.string(),
      instructions: z.string().nullable(),
      tools: z.array(toolSchema),
      metadata: metadataSchema,
      tool_resources: toolResourcesSchema,
      temperature: z.number(),
      top_p: z.number(),
      response_format: responseFormatSchema,
    })
    .meta({ id: 'AssistantObject' }),
);

export type AssistantObject = z.infer<ReturnType<typeof assistantObject>>;
