import * as z from 'zod';

/**
 * The objects the API answers are zod schemas, each resource's in its objects.ts
 * (resources/<name>/objects.ts): its wire mappers return the types inferred from them, and its
 * routes declare them as their answers (http/middleware/responds.ts), from which the OpenAPI
 * document describes each operation's success. One description, so the document cannot drift from
 * what is sent: a mapper that builds a field the schema does not have fails to typecheck. This file
 * holds what they share. Timestamps are Unix seconds, as OpenAI's, except policies' (ISO 8601, the
 * README's).
 *
 * Each is declared `onDemand`: built the first time it is asked for, by the document's generator
 * (`npm run openapi`) or the rare code that parses with one, and never in a process that does
 * neither, which is a server's usual life (docs/development.md, "Known limits").
 */

/** A schema (or a shape of schemas) built by `build` when first asked for: what onDemand returns. */
export type OnDemand<T> = () => T;

let built = 0;

/**
 * `build`'s schema, built on the first call and that one kept: a schema two others use stays one
 * object, as the document's references expect, and `.meta({ id })` registers it once. The eager
 * routes' answers are about 580 zod schemas, 0.6 MB of heap, that a server would otherwise hold for
 * nothing.
 */
export function onDemand<T>(build: () => T): OnDemand<T> {
  let schema: T | undefined;
  return () => {
    if (schema === undefined) {
      schema = build();
      built += 1;
    }
    return schema;
  };
}

/** How many onDemand schemas this process has built: none until something asks (objects-on-demand.test.ts). */
export const onDemandBuilt = (): number => built;

export const seconds = z.int();
export const nullableSeconds = seconds.nullable();

/** A part of text, as file search results and a vector store file's content give it. */
export const textPart = onDemand(() => z.strictObject({ type: z.literal('text'), text: z.string() }));

/** GET /health: the process is up and serving; whether runs may use code_interpreter (a sandbox is there). */
export const healthObject = onDemand(() => z.strictObject({ status: z.literal('ok'), code_interpreter: z.boolean() }));

/** OpenAI's list object over `item`: one page, its first and last ids, whether more follow. */
export const listOf = <Item extends z.ZodType>(item: OnDemand<Item>) =>
  onDemand(() =>
    z.strictObject({
      object: z.literal('list'),
      data: z.array(item()),
      first_id: z.string().nullable(),
      last_id: z.string().nullable(),
      has_more: z.boolean(),
    }),
  );

/** OpenAI's list of every `item` at once, unpaginated (GET /v1/models, /v1/workspaces, /v1/api-keys, /v1/virtual-keys). */
export const everyOf = <Item extends z.ZodType>(item: OnDemand<Item>) =>
  onDemand(() => z.strictObject({ object: z.literal('list'), data: z.array(item()) }));

/** What a DELETE answers: the id, `<object>.deleted` and `deleted: true`. */
export const deletedObject = <Name extends string>(object: Name) =>
  onDemand(() => z.strictObject({ id: z.string(), object: z.literal(object), deleted: z.literal(true) }));
