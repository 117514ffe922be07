import { and, gte, inArray, lt, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../../db/client';
import { usage, USAGE_KINDS, virtualKeys, workspaces, type UsageKind } from '../../db/schema';
import type { UsagePage, UsageResult } from './objects';
import { BUCKET_LIMITS, type BucketWidth, type UsageGroup } from './schemas';

/**
 * Token usage, added up: per hour in the `usage` table (runs by a trigger as they end, embeddings
 * calls by retrieval/embed.ts), read here into buckets of an hour or a day.
 */

const HOUR_MS = 3_600_000;
const WIDTH_MS: Record<BucketWidth, number> = { '1h': HOUR_MS, '1d': 24 * HOUR_MS };

export interface UsageRequest {
  /** The workspaces counted: one, or every one of an organisation. */
  scope: { workspaceId: string } | { organisationId: string };
  startMs: number | undefined;
  endMs: number | undefined;
  width: BucketWidth;
  groupBy: UsageGroup[];
  limit: number | undefined;
  /** A previous answer's next_page: the start of the next bucket, Unix seconds. */
  page: string | undefined;
  now: number;
}

/**
 * The buckets of one page, every bucket of the range whether it has usage or not (as OpenAI's
 * usage API answers), each with one result per group of `groupBy` that has usage (or one result
 * for the whole bucket). One indexed query over the hours of the page.
 */
export async function usageBuckets(db: Db, request: UsageRequest): Promise<UsagePage> {
  const width = WIDTH_MS[request.width];
  const limit = request.limit ?? BUCKET_LIMITS[request.width].default;
  const floor = (ms: number) => ms - (ms % width);
  const end = request.endMs ?? floor(request.now) + width;
  const first =
    request.page !== undefined ? Number(request.page) * 1000 : floor(request.startMs ?? end - limit * width);
  const last = Math.min(end, first + limit * width);
  const starts: number[] = [];
  for (let start = first; start < last; start += width) starts.push(start);

  const bucket = sql<number>`${usage.hour} - (${usage.hour} % ${width})`;
  const columns: Record<UsageGroup, SQL> = {
    workspace_id: sql`${usage.workspaceId}`,
    api_key_id: sql`${usage.apiKeyId}`,
    virtual_key: sql`(SELECT ${virtualKeys.slug} FROM ${virtualKeys} WHERE ${virtualKeys.id} = ${usage.virtualKeyId})`,
    model: sql`${usage.model}`,
    kind: sql`${usage.kind}`,
  };
  const inScope =
    'workspaceId' in request.scope
      ? sql`${usage.workspaceId} = ${request.scope.workspaceId}`
      : inArray(
          usage.workspaceId,
          db
            .select({ id: workspaces.id })
            .from(workspaces)
            .where(sql`${workspaces.organisationId} = ${request.scope.organisationId}`),
        );
  const groups = request.groupBy;
  const rows = await db
    .select({
      bucket,
      // Only the groups asked for are selected (and grouped by).
      keys: Object.fromEntries(groups.map((group) => [group, sql<string | null>`${columns[group]}`])),
      input: sql<number>`sum(${usage.promptTokens})`,
      output: sql<number>`sum(${usage.completionTokens})`,
      total: sql<number>`sum(${usage.totalTokens})`,
      requests: sql<number>`sum(${usage.requests})`,
    })
    .from(usage)
    .where(and(inScope, gte(usage.hour, first), lt(usage.hour, last)))
    .groupBy(bucket, ...groups.map((group) => columns[group]))
    .orderBy(bucket);

  const byBucket = new Map<number, UsageResult[]>();
  for (const row of rows) {
    // Drizzle answers no object at all for an empty selection (no group_by).
    const named: Partial<Record<string, string | null>> = row.keys ?? {};
    const result: UsageResult = {
      object: 'usage.result',
      input_tokens: Number(row.input),
      output_tokens: Number(row.output),
      total_tokens: Number(row.total),
      num_requests: Number(row.requests),
      workspace_id: named.workspace_id ?? null,
      api_key_id: named.api_key_id ?? null,
      virtual_key: named.virtual_key ?? null,
      model: named.model ?? null,
      kind: isUsageKind(named.kind) ? named.kind : null,
    };
    const list = byBucket.get(Number(row.bucket)) ?? [];
    list.push(result);
    byBucket.set(Number(row.bucket), list);
  }
  const hasMore = last < end;
  return {
    object: 'page',
    data: starts.map((start) => ({
      object: 'bucket',
      start_time: start / 1000,
      end_time: (start + width) / 1000,
      results: byBucket.get(start) ?? [],
    })),
    has_more: hasMore,
    next_page: hasMore ? String(last / 1000) : null,
  };
}

const isUsageKind = (value: string | null | undefined): value is UsageKind =>
  USAGE_KINDS.some((kind) => kind === value);
