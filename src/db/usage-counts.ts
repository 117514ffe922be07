import { sql } from 'drizzle-orm';
import { preparedQuery, type Db } from './client';
import { usage, type UsageKind } from './schema';

/** One call the gateway made for a caller, as the `usage` table counts it. */
export interface CountedCall {
  kind: Exclude<UsageKind, 'run' | 'response'>;
  workspaceId: string;
  /** When it was made, ms since the epoch: it counts in that hour. */
  at: number;
  model: string;
  apiKeyId: string;
  virtualKeyId: string;
  promptTokens: number;
  completionTokens: number;
}

const HOUR_MS = 3_600_000;

/**
 * Counts one call in its hour of the `usage` table (GET /v1/usage reads it), in one upsert: a
 * request and its tokens, added to the row of its hour, kind, model, API key and virtual key.
 * Runs and responses are not counted here but by the trigger on the statement that ends them (migration 0015).
 */
export async function recordUsage(db: Db, call: CountedCall): Promise<void> {
  const prompt = tokenCount(call.promptTokens);
  const completion = tokenCount(call.completionTokens);
  await countCall(db).run({
    workspaceId: call.workspaceId,
    hour: call.at - (call.at % HOUR_MS),
    kind: call.kind,
    model: call.model,
    apiKeyId: call.apiKeyId,
    virtualKeyId: call.virtualKeyId,
    prompt,
    completion,
    total: prompt + completion,
  });
}

// Prepared once per database: every pass-through call ends with it, and building the upsert
// anew each time cost more than running it.
const countCall = preparedQuery((db) =>
  db
    .insert(usage)
    .values({
      workspaceId: sql.placeholder('workspaceId'),
      hour: sql.placeholder('hour'),
      kind: sql.placeholder('kind'),
      model: sql.placeholder('model'),
      apiKeyId: sql.placeholder('apiKeyId'),
      virtualKeyId: sql.placeholder('virtualKeyId'),
      requests: 1,
      promptTokens: sql.placeholder('prompt'),
      completionTokens: sql.placeholder('completion'),
      totalTokens: sql.placeholder('total'),
    })
    .onConflictDoUpdate({
      target: [usage.workspaceId, usage.hour, usage.kind, usage.model, usage.apiKeyId, usage.virtualKeyId],
      set: {
        requests: sql`${usage.requests} + 1`,
        promptTokens: sql`${usage.promptTokens} + excluded.prompt_tokens`,
        completionTokens: sql`${usage.completionTokens} + excluded.completion_tokens`,
        totalTokens: sql`${usage.totalTokens} + excluded.total_tokens`,
      },
    })
    .prepare(),
);

const tokenCount = (tokens: number) => Math.max(0, Math.floor(tokens));
