// @ts-check
/**
 * bench:compare's floor: a streamed chat completion passed through on this gateway's own stack
 * (hono, @hono/node-server, undici's pooled Agent, the response a web stream as the gateway's
 * is), checking, storing and executing nothing. What it costs is what any gateway built on this
 * stack pays before it does its own work; the gateway's figures less these are that work.
 *
 * Plain JavaScript, run by bench/compare.ts as `node bench/floor-proxy.js <port> <provider origin>`
 * without a TypeScript loader, so that its process holds what the stack holds and nothing else.
 */
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { Agent } from 'undici';

const [port, origin] = process.argv.slice(2);
if (!port || !origin) throw new Error('usage: node bench/floor-proxy.js <port> <provider origin>');

const agent = new Agent({ headersTimeout: 0, bodyTimeout: 0 });
const app = new Hono();

app.post('/v1/chat/completions', async (c) => {
  const upstream = await agent.request({
    origin,
    path: '/v1/chat/completions',
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: await c.req.text(),
  });
  const chunks = upstream.body[Symbol.asyncIterator]();
  const body = new ReadableStream({
    async pull(controller) {
      const { done, value } = await chunks.next();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel: () => {
      upstream.body.destroy();
    },
  });
  return c.body(body, 200, { 'content-type': 'text/event-stream' });
});

serve({ fetch: app.fetch, port: Number(port), hostname: '127.0.0.1' }, () => console.log('ready'));
