import * as z from 'zod';
import { metadataSchema } from '../../http/schemas';
import { responseFormatSchema, toolsSchema } from '../../db/json-columns';
import { toolResourcesInputSchema } from '../vector-stores/schemas';

/**
 * Assistants: OpenAI's CreateAssistantRequest with the gateway's bounds (README: name 256,
 * description 512, instructions 256000, tools 128, metadata, temperature 0–2, top_p 0–1).
 */

export const ASSISTANT_LIMITS = { model: 256, name: 256, description: 512, instructions: 256_000, tools: 128 } as const;

export const createAssistantBody = z.strictObject({
  model: z.string().min(1).max(ASSISTANT_LIMITS.model),
  name: z.string().max(ASSISTANT_LIMITS.name).nullable().optional(),
  description: z.string().max(ASSISTANT_LIMITS.description).nullable().optional(),
  instructions: z.string().max(ASSISTANT_LIMITS.instructions).nullable().optional(),
  tools: toolsSchema(ASSISTANT_LIMITS.tools).optional(),
  tool_resources: toolResourcesInputSchema.nullable().optional(),
  metadata: metadataSchema.nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  response_format: responseFormatSchema.nullable().optional(),
});
export type CreateAssistantBody = z.infer<typeof createAssistantBody>;

/**
 * POST /v1/assistants/{assistant_id}: OpenAI's ModifyAssistantRequest, every field of create with
 * the same bounds, each optional; the fields sent replace the stored ones. Its tool_resources may
 * create a vector store too, which OpenAI's modify did not take (a client written for it never sends one).
 */
export const modifyAssistantBody = createAssistantBody.partial();
export type ModifyAssistantBody = z.infer<typeof modifyAssistantBody>;
