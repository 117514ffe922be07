import { Hono } from 'hono';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import { passedThrough } from '../pass-through/route';
import type { ApiEnv } from '../identities/env';
import { workspace } from '../identities/middleware/workspace';
import { COMPLETIONS } from './commands';
import { completionObject } from './objects';
import { createCompletionBody } from './schemas';

/** /v1/completions (legacy): passed through to the provider of the request's virtual key, its answer or stream as sent. */
export const completionRoutes = new Hono<ApiEnv>()
  .use(workspace())
  .post(
    '/',
    responds({ summary: 'Create a completion', ok: completionObject, stream: 'completion', errors: [429, 502, 504] }),
    validate('json', createCompletionBody),
    (c) => passedThrough(c, COMPLETIONS, c.req.valid('json')),
  );
