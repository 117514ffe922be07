import { Hono } from 'hono';
import { responds } from '../../http/middleware/responds';
import { requestContext } from '../../http/request-context';
import { validate } from '../../http/middleware/validate';
import type { ApiEnv } from '../identities/env';
import { workspace } from '../identities/middleware/workspace';
import { createChatCompletion } from './commands';
import { chatCompletionObject } from './objects';
import { createChatCompletionBody } from './schemas';

/**
 * /v1/chat/completions, in the workspace of workspace(): passed through to the provider of the
 * request's virtual key (commands.ts), its answer as the provider sent it.
 */
export const chatCompletionRoutes = new Hono<ApiEnv>().use(workspace()).post(
  '/',
  responds({
    summary: 'Create a chat completion',
    ok: chatCompletionObject,
    stream: 'chat',
    errors: [429, 502, 504],
  }),
  validate('json', createChatCompletionBody),
  async (c) => {
    const answer = await createChatCompletion(c.get('deps'), c.get('actor'), c.get('settings'), c.req.valid('json'), {
      ...requestContext(c),
      signal: c.req.raw.signal,
    });
    return new Response(answer.body, { status: 200, headers: answer.headers });
  },
);
