import { Hono, type Context } from 'hono';
import { responds } from '../../http/middleware/responds';
import { requestContext } from '../../http/request-context';
import { validate } from '../../http/middleware/validate';
import type { ApiEnv, WorkspaceEnv } from '../identities/env';
import { workspace } from '../identities/middleware/workspace';
import { CHAT_COMPLETIONS, passThrough, type PassThroughEndpoint } from './commands';
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
  (c) => passedThrough(c, CHAT_COMPLETIONS, c.req.valid('json')),
);

/** The answer of a route passed through to `endpoint` (this one's, and completions', embeddings' and moderations'). */
export async function passedThrough<Body extends object>(
  c: Context<WorkspaceEnv>,
  endpoint: PassThroughEndpoint<Body>,
  body: Body,
): Promise<Response> {
  const answer = await passThrough(c.get('deps'), c.get('actor'), c.get('settings'), endpoint, body, {
    ...requestContext(c),
    signal: c.req.raw.signal,
  });
  return new Response(answer.body, { status: 200, headers: answer.headers });
}
