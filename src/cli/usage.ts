import { validationError } from '../http/middleware/validate';
import { usageQuery } from '../resources/usage/schemas';
import { usageBuckets } from '../resources/usage/queries';
import { optionalString, UsageError, type CommandContext } from './command';
import { resolveOrganisation } from './identities';
import { formatTable } from './output';
import { resolveWorkspace } from './virtual-keys';

/**
 * `gateway usage`: what GET /v1/usage answers (resources/usage/queries.ts), with the same options under
 * the same validation, for one workspace or a whole organisation.
 */

/** `--since` / `--until`: a date or time as ISO 8601 (UTC when no zone is given), or Unix seconds. */
function unixSeconds(ctx: CommandContext, option: string): string | undefined {
  const value = optionalString(ctx, option);
  if (value === undefined) return undefined;
  if (/^\d+$/.test(value)) return value;
  const ms = Date.parse(/^\d{4}-\d{2}-\d{2}$/.test(value) ? `${value}T00:00:00Z` : value);
  if (Number.isNaN(ms))
    throw new UsageError(`--${option}: expected a date (2026-11-01), a time (2026-11-01T10:00Z) or Unix seconds`);
  return String(Math.floor(ms / 1000));
}

export async function usageCommand(ctx: CommandContext): Promise<void> {
  const input = Object.fromEntries(
    Object.entries({
      start_time: unixSeconds(ctx, 'since'),
      end_time: unixSeconds(ctx, 'until'),
      bucket_width: optionalString(ctx, 'bucket'),
      group_by: optionalString(ctx, 'group-by'),
      limit: optionalString(ctx, 'limit'),
    }).filter(([, value]) => value !== undefined),
  );
  const parsed = usageQuery.safeParse(input);
  if (!parsed.success) throw validationError(parsed.error.issues, input, 'query');
  const query = parsed.data;
  const workspaceRef = optionalString(ctx, 'workspace');
  const scope = workspaceRef
    ? { workspaceId: (await resolveWorkspace(ctx, workspaceRef)).id }
    : { organisationId: await resolveOrganisation(ctx) };
  const page = await usageBuckets(ctx.db, {
    scope,
    startMs: query.start_time === undefined ? undefined : query.start_time * 1000,
    endMs: query.end_time === undefined ? undefined : query.end_time * 1000,
    width: query.bucket_width,
    groupBy: query.group_by ?? [],
    limit: query.limit,
    page: undefined,
    now: ctx.now(),
  });
  if (ctx.json) return ctx.print(JSON.stringify(page));
  const groups = query.group_by ?? [];
  const rows = page.data.flatMap((bucket) =>
    bucket.results.map((result) => ({ start: new Date(bucket.start_time * 1000).toISOString(), ...result })),
  );
  ctx.print(formatTable(rows, ['start', ...groups, 'input_tokens', 'output_tokens', 'total_tokens', 'num_requests']));
  if (page.has_more) ctx.print(`More buckets follow: --since ${page.next_page}\n`);
}
