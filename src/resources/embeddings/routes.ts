import { Hono } from 'hono';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import { passedThrough } from '../pass-through/route';
import type { ApiEnv } from '../identities/env';
import { workspace } from '../identities/middleware/workspace';
import { EMBEDDINGS } from './commands';
import { embeddingList } from './objects';
import { createEmbeddingBody } from './schemas';

/** /v1/embeddings: passed through to the provider of the request's virtual key, its answer as sent. */
export const embeddingRoutes = new Hono<ApiEnv>()
  .use(workspace())
  .post(
    '/',
    responds({ summary: 'Create embeddings', ok: embeddingList, errors: [429, 502, 504] }),
    validate('json', createEmbeddingBody),
    (c) => passedThrough(c, EMBEDDINGS, c.req.valid('json')),
  );
