import { sql } from 'drizzle-orm';
import type { Db } from './client';
import { usage, type UsageKind } from './schema';

/** One call the gateway made for a caller, as the `usage` table counts it. */
export interface CountedCall {
  kind: Exclude<UsageKind, 'run'>;
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
 * Runs are not counted here but by the trigger on the statement that ends them (migration 0006).
 */
export async function recordUsage(db: Db, call: CountedCall): Promise<void> {
  const prompt = tokenCount(call.promptTokens);
  const completion = tokenCount(call.completionTokens);
  const total = prompt + completion;
  await db
    .insert(usage)
    .values({
      workspaceId: call.workspaceId,
      hour: call.at - (call.at % HOUR_MS),
      kind: call.kind,
      model: call.model,
      apiKeyId: call.apiKeyId,
      virtualKeyId: call.virtualKeyId,
      requests: 1,
      promptTokens: prompt,
      completionTokens: completion,
      totalTokens: total,
    })
    .onConflictDoUpdate({
      target: [usage.workspaceId, usage.hour, usage.kind, usage.model, usage.apiKeyId, usage.virtualKeyId],
      set: {
        requests: sql`${usage.requests} + 1`,
        promptTokens: sql`${usage.promptTokens} + ${prompt}`,
        completionTokens: sql`${usage.completionTokens} + ${completion}`,
        totalTokens: sql`${usage.totalTokens} + ${total}`,
      },
    });
}

const tokenCount = (tokens: number) => Math.max(0, Math.floor(tokens));
