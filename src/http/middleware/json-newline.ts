import { createMiddleware } from 'hono/factory';
import type { ContentfulStatusCode, StatusCode } from 'hono/utils/http-status';
import { jsonText } from '../../lib/json-text';

const JSON_TYPE = 'application/json';

/**
 * Every JSON answer the routes give ends with a newline (lib/json-text.ts): this gives each
 * request's context a `c.json` that writes `jsonText(value)`, with Hono's arguments, defaults and
 * headers, so that routes keep calling `c.json` and keep its typed responses. Error envelopes
 * (errors.ts's errorResponse) end the same way; event streams are not JSON answers and are
 * untouched.
 */
export const jsonNewline = () =>
  createMiddleware((c, next) => {
    function json(
      value: unknown,
      arg?:
        | ContentfulStatusCode
        | { status?: StatusCode; statusText?: string; headers?: ConstructorParameters<typeof Headers>[0] },
      headers?: Record<string, string | string[]>,
    ): Response {
      if (typeof arg !== 'object')
        return c.newResponse(jsonText(value), arg, { 'Content-Type': JSON_TYPE, ...headers });
      const merged = new Headers(arg.headers);
      if (!merged.has('content-type')) merged.set('content-type', JSON_TYPE);
      return c.newResponse(jsonText(value), { ...arg, headers: merged });
    }
    // Hono's TypedResponse is a type-level brand that no function can produce: Hono's own `json`
    // is cast to it the same way.
    c.json = json as typeof c.json;
    return next();
  });
