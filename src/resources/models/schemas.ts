import * as z from 'zod';

/** GET /v1/models/{model}: a model's id, which may hold slashes (`meta-llama/Llama-3.1-8B`). */
export const modelParams = z.object({ model: z.string().min(1).max(256) });
