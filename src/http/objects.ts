import * as z from 'zod';

/**
 * The objects the API answers are zod schemas, each resource's in its objects.ts
 * (resources/<name>/objects.ts): its wire mappers return the types inferred from them, and its
 * routes declare them as their answers (http/middleware/responds.ts), from which the OpenAPI
 * document describes each operation's success. One description, so the document cannot drift from
 * what is sent: a mapper that builds a field the schema does not have fails to typecheck. This file
 * holds what they share. Timestamps are Unix seconds, as OpenAI's, except policies' (ISO 8601, the
 * README's).
 */

export const seconds = z.int();
export const nullableSeconds = seconds.nullable();

/** A part of text, as file search results and a vector store file's content give it. */
export const textPart = z.strictObject({ type: z.literal('text'), text: z.string() });

/** GET /health: the process is up and serving; whether runs may use code_interpreter (a sandbox is there). */
export const healthObject = z.strictObject({ status: z.literal('ok'), code_interpreter: z.boolean() });

/** OpenAI's list object over `item`: one page, its first and last ids, whether more follow. */
export const listOf = <Item extends z.ZodType>(item: Item) =>
  z.strictObject({
    object: z.literal('list'),
    data: z.array(item),
    first_id: z.string().nullable(),
    last_id: z.string().nullable(),
    has_more: z.boolean(),
  });

/** What a DELETE answers: the id, `<object>.deleted` and `deleted: true`. */
export const deletedObject = <Name extends string>(object: Name) =>
  z.strictObject({ id: z.string(), object: z.literal(object), deleted: z.literal(true) });
