import { and, eq, gte, inArray, lt, sql, type SQL } from 'drizzle-orm';
import type { AnySQLiteColumn } from 'drizzle-orm/sqlite-core';
import type { Db } from '../../db/client';
import { runs, usage, USAGE_KINDS, virtualKeys, workspaces, type UsageKind } from '../../db/schema';
import type { RunStatus } from '../../db/run-statuses';
import type { Page, RunUsagePage, RunUsageResult, UsagePage, UsageResult } from './objects';
import { BUCKET_LIMITS, type BucketWidth, type UsageGroup } from './schemas';

/**
 * Token usage, added up: per hour in the `usage` table (runs by a trigger as they end, embeddings
 * calls by retrieval/embed.ts), read here into buckets of an hour or a day. And runs, counted by
 * status from the runs table (GET /v1/usage/runs).
 */

const HOUR_MS = 3_600_000;
const WIDTH_MS: Record<BucketWidth, number> = { '1h': HOUR_MS, '1d': 24 * HOUR_MS };

/** The buckets of time a page asks for, and whose. */
export interface BucketRequest {
  /** The workspaces counted: one, or every one of an organisation. */
  scope: { workspaceId: string } | { organisationId: string };
  startMs: number | undefined;
  endMs: number | undefined;
  width: BucketWidth;
  limit: number | undefined;
  /** A previous answer's next_page: the start of the next bucket, Unix seconds. */
  page: string | undefined;
  now: number;
}

export interface UsageRequest extends BucketRequest {
  groupBy: UsageGroup[];
}

/** A page's buckets: their width, the first one's start and the end of the last, and where the range ends. */
interface Buckets {
  width: number;
  first: number;
  last: number;
  end: number;
}

function bucketsOf(request: BucketRequest): Buckets {
  const width = WIDTH_MS[request.width];
  const limit = request.limit ?? BUCKET_LIMITS[request.width].default;
  const floor = (ms: number) => ms - (ms % width);
  const end = request.endMs ?? floor(request.now) + width;
  const first =
    request.page !== undefined ? Number(request.page) * 1000 : floor(request.startMs ?? end - limit * width);
  return { width, first, last: Math.min(end, first + limit * width), end };
}

/** The page of `buckets`, every bucket whether it has results or not, with the results found for each. */
function pageOf<Result>({ width, first, last, end }: Buckets, results: Map<number, Result[]>): Page<Result> {
  const data = [];
  for (let start = first; start < last; start += width) {
    data.push({
      object: 'bucket' as const,
      start_time: start / 1000,
      end_time: (start + width) / 1000,
      results: results.get(start) ?? [],
    });
  }
  const hasMore = last < end;
  return { object: 'page', data, has_more: hasMore, next_page: hasMore ? String(last / 1000) : null };
}

/** `workspaceColumn` within the request's scope: its workspace, or its organisation's. */
function inScope(db: Db, scope: BucketRequest['scope'], workspaceColumn: AnySQLiteColumn): SQL {
  return 'workspaceId' in scope
    ? sql`${workspaceColumn} = ${scope.workspaceId}`
    : inArray(
        workspaceColumn,
        db
          .select({ id: workspaces.id })
          .from(workspaces)
          .where(sql`${workspaces.organisationId} = ${scope.organisationId}`),
      );
}

/** Adds `result` to its bucket's list. */
function addTo<Result>(results: Map<number, Result[]>, bucket: number, result: Result): void {
  const list = results.get(bucket) ?? [];
  list.push(result);
  results.set(bucket, list);
}

/**
 * The buckets of one page, every bucket of the range whether it has usage or not (as OpenAI's
 * usage API answers), each with one result per group of `groupBy` that has usage (or one result
 * for the whole bucket). One indexed query over the hours of the page.
 */
export async function usageBuckets(db: Db, request: UsageRequest): Promise<UsagePage> {
  const buckets = bucketsOf(request);
  const { width, first, last } = buckets;
  const bucket = sql<number>`${usage.hour} - (${usage.hour} % ${width})`;
  const columns: Record<UsageGroup, SQL> = {
    workspace_id: sql`${usage.workspaceId}`,
    api_key_id: sql`${usage.apiKeyId}`,
    virtual_key: sql`(SELECT ${virtualKeys.slug} FROM ${virtualKeys} WHERE ${virtualKeys.id} = ${usage.virtualKeyId})`,
    model: sql`${usage.model}`,
    kind: sql`${usage.kind}`,
  };
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
    .where(and(inScope(db, request.scope, usage.workspaceId), gte(usage.hour, first), lt(usage.hour, last)))
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
    addTo(byBucket, Number(row.bucket), result);
  }
  return pageOf(buckets, byBucket);
}

/**
 * Runs (of the Assistants API) by status, and by their last_error's code, in the bucket of their
 * creation: one query over the index runs_workspace_created. A run still going is counted in its
 * current status.
 */
export async function runBuckets(db: Db, request: BucketRequest): Promise<RunUsagePage> {
  const buckets = bucketsOf(request);
  const { width, first, last } = buckets;
  const bucket = sql<number>`${runs.createdAt} - (${runs.createdAt} % ${width})`;
  const errorCode = sql<string | null>`json_extract(${runs.lastError}, '$.code')`;
  const rows = await db
    .select({ bucket, status: runs.status, errorCode, count: sql<number>`count(*)` })
    .from(runs)
    .where(
      and(
        inScope(db, request.scope, runs.workspaceId),
        eq(runs.kind, 'run'),
        gte(runs.createdAt, first),
        lt(runs.createdAt, last),
      ),
    )
    .groupBy(bucket, runs.status, errorCode)
    .orderBy(bucket);
  const byBucket = new Map<number, RunUsageResult[]>();
  for (const row of rows) {
    const status: RunStatus = row.status;
    addTo(byBucket, Number(row.bucket), {
      object: 'usage.runs.result',
      status,
      error_code: row.errorCode,
      num_runs: Number(row.count),
    });
  }
  return pageOf(buckets, byBucket);
}

const isUsageKind = (value: string | null | undefined): value is UsageKind =>
  USAGE_KINDS.some((kind) => kind === value);
