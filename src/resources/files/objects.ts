import * as z from 'zod';
import { nullableSeconds, onDemand, seconds } from '../../http/objects';

/** A file as the API answers it (see http/objects.ts). */

export const fileObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('file'),
      bytes: z.int(),
      created_at: seconds,
      expires_at: nullableSeconds,
      filename: z.string(),
      purpose: z.string(),
      status: z.literal('processed'),
      status_details: z.null(),
    })
    .meta({ id: 'OpenAIFile' }),
);

export type FileObject = z.infer<ReturnType<typeof fileObject>>;
