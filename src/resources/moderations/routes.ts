import { Hono } from 'hono';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import { passedThrough } from '../pass-through/route';
import type { ApiEnv } from '../identities/env';
import { workspace } from '../identities/middleware/workspace';
import { MODERATIONS } from './commands';
import { moderationObject } from './objects';
import { createModerationBody } from './schemas';

/** /v1/moderations: passed through to the provider of the request's virtual key, its answer as sent. */
export const moderationRoutes = new Hono<ApiEnv>()
  .use(workspace())
  .post(
    '/',
    responds({ summary: 'Create a moderation', ok: moderationObject, errors: [429, 502, 504] }),
    validate('json', createModerationBody),
    (c) => passedThrough(c, MODERATIONS, c.req.valid('json')),
  );
