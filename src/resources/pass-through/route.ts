import type { Context } from 'hono';
import { requestContext } from '../../http/request-context';
import { withBody } from '../../lib/direct-body';
import type { WorkspaceEnv } from '../identities/env';
import { passThrough, type PassThroughEndpoint } from './pipeline';

/** The answer of a route passed through to `endpoint` (chat completions', completions', embeddings' and moderations'). */
export async function passedThrough<Body extends object>(
  c: Context<WorkspaceEnv>,
  endpoint: PassThroughEndpoint<Body>,
  body: Body,
): Promise<Response> {
  const answer = await passThrough(c.get('deps'), c.get('actor'), c.get('settings'), endpoint, body, {
    ...requestContext(c),
    signal: c.req.raw.signal,
  });
  return withBody(new Response(answer.body, { status: 200, headers: answer.headers }), answer.body);
}
