import type { MiddlewareHandler } from 'hono';
import type * as z from 'zod';
import type { ErrorStatus } from '../../errors';
import type { OnDemand } from '../objects';

/** What a route answers, as the OpenAPI document describes it. */
export interface ResponseDeclaration {
  /** The operation's name, as a sentence: "Create an assistant". */
  summary: string;
  /** The body of its success (200), built when the document is (http/objects.ts, onDemand). */
  ok: OnDemand<z.ZodType>;
  /** The success is `application/octet-stream` (a file's bytes), not JSON. */
  bytes?: true;
  /** The success is text of this content type (GET /metrics: Prometheus's), not JSON. */
  text?: string;
  /**
   * With `stream: true` in its body, the success is a `text/event-stream`: of the run's events
   * (`run`), of a response's (`response`), or of the provider's chat completion chunks (`chat`) or
   * legacy completions (`completion`).
   */
  stream?: 'run' | 'response' | 'chat' | 'completion';
  /**
   * Its error statuses beyond those the document gives a route from its shape: 401 for every route
   * under /v1, 400 for one that validates input, 404 for one whose path names something.
   */
  errors?: ErrorStatus[];
}

/**
 * Each declaring middleware, with its declaration: the OpenAPI document is generated from these
 * (http/openapi/generate.ts), beside what http/middleware/validate.ts records of each route's input.
 */
export const declaredResponses = new WeakMap<object, ResponseDeclaration>();

/**
 * Declares what the route it is given to answers, next to its validators:
 * `.post('/', responds({ summary: 'Create an assistant', ok: assistantObject }), validate('json', …), handler)`.
 * It does nothing with the request: the declaration is for the document, and the wire mappers
 * (each resource's wire.ts) return the types inferred from the same schemas.
 */
export function responds(declaration: ResponseDeclaration): MiddlewareHandler {
  const middleware: MiddlewareHandler = (_c, next) => next();
  declaredResponses.set(middleware, declaration);
  return middleware;
}
