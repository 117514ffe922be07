import { Hono } from 'hono';
import { requestContext } from '../../http/request-context';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import { deletedObject, listOf } from '../../http/objects';
import type { ApiEnv } from '../identities/env';
import { workspace } from '../identities/middleware/workspace';
import { eventStreamResponse } from '../runs/execution/event-stream';
import {
  cancelResponse,
  countInputTokens,
  createResponse,
  deleteResponse,
  listInputItems,
  retrieveResponse,
  streamResponse,
} from './commands';
import { inputTokensObject, responseItemObject, responseObject } from './objects';
import { createResponseBody, inputTokensBody, listInputItemsQuery, retrieveResponseQuery } from './schemas';

/**
 * /v1/responses, in the workspace of workspace(): a response created (streamed, answered whole, or
 * in the background), read, deleted, cancelled, its input listed, its input's tokens counted.
 * Each handler validates, calls one use-case of commands.ts and answers what it returns.
 */
export const responseRoutes = new Hono<ApiEnv>()
  .use(workspace())
  .post(
    '/',
    responds({ summary: 'Create a model response', ok: responseObject, stream: 'response', errors: [429] }),
    validate('json', createResponseBody),
    async (c) => {
      const answer = await createResponse(
        c.get('deps'),
        c.get('actor'),
        c.get('settings'),
        c.req.valid('json'),
        requestContext(c),
      );
      if (!answer.stream) return c.json(answer.response, 200, answer.headers);
      return eventStreamResponse(answer.events, answer.headers);
    },
  )
  .post(
    '/input_tokens',
    responds({ summary: "Count a response's input tokens", ok: inputTokensObject }),
    validate('json', inputTokensBody),
    async (c) => {
      const tokens = await countInputTokens(c.get('deps'), c.get('actor'), c.get('settings'), c.req.valid('json'));
      return c.json({ object: 'response.input_tokens' as const, input_tokens: tokens });
    },
  )
  .get(
    '/:response_id',
    responds({ summary: 'Get a model response', ok: responseObject, stream: 'response' }),
    validate('query', retrieveResponseQuery),
    async (c) => {
      const query = c.req.valid('query');
      const id = c.req.param('response_id');
      const { workspaceId } = c.get('actor');
      if (query.stream !== 'true') return c.json(await retrieveResponse(c.get('deps'), workspaceId, id));
      const events = await streamResponse(c.get('deps'), workspaceId, id, query.starting_after);
      return eventStreamResponse(events);
    },
  )
  .delete(
    '/:response_id',
    responds({ summary: 'Delete a model response', ok: deletedObject('response') }),
    async (c) => {
      const id = c.req.param('response_id');
      await deleteResponse(c.get('deps'), c.get('actor').workspaceId, id);
      return c.json({ id, object: 'response' as const, deleted: true as const });
    },
  )
  .post('/:response_id/cancel', responds({ summary: 'Cancel a response', ok: responseObject }), async (c) =>
    c.json(
      await cancelResponse(c.get('deps'), c.get('actor').workspaceId, c.req.param('response_id'), requestContext(c)),
    ),
  )
  .get(
    '/:response_id/input_items',
    responds({ summary: "List a response's input items", ok: listOf(responseItemObject) }),
    validate('query', listInputItemsQuery),
    async (c) =>
      c.json(
        await listInputItems(
          c.get('deps'),
          c.get('actor').workspaceId,
          c.req.param('response_id'),
          c.req.valid('query'),
        ),
      ),
  );
