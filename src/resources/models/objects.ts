import * as z from 'zod';
import { everyOf, onDemand } from '../../http/objects';

/** A model the workspace can use, and the virtual key that serves it (`owned_by`, its slug). */
export const modelObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('model'),
      /** When the provider says it made the model; else when the virtual key was created (seconds). */
      created: z.int(),
      owned_by: z.string(),
    })
    .meta({ id: 'Model' }),
);

export type ModelObject = z.infer<ReturnType<typeof modelObject>>;

/** OpenAI's ListModelsResponse: every model at once, unpaginated. */
export const modelList = onDemand(() => everyOf(modelObject)().meta({ id: 'ListModelsResponse' }));
