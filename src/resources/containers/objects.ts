import * as z from 'zod';
import { onDemand, seconds } from '../../http/objects';

/** A container and its files as the API answers them (OpenAI's ContainerRetrieveResponse, FileRetrieveResponse). */

export const containerObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('container'),
      name: z.string(),
      status: z.enum(['running', 'expired']),
      created_at: seconds,
      last_active_at: seconds,
      expires_after: z.strictObject({ anchor: z.literal('last_active_at'), minutes: z.int() }),
      memory_limit: z.enum(['1g', '4g', '16g', '64g']).optional(),
    })
    .meta({ id: 'Container' }),
);

export type ContainerObject = z.infer<ReturnType<typeof containerObject>>;

export const containerFileObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('container.file'),
      container_id: z.string(),
      bytes: z.int(),
      created_at: seconds,
      path: z.string(),
      source: z.enum(['user', 'assistant']),
    })
    .meta({ id: 'ContainerFile' }),
);

export type ContainerFileObject = z.infer<ReturnType<typeof containerFileObject>>;
