import { and, asc, desc, eq, gt, lt, sql, type Placeholder, type SQL } from 'drizzle-orm';
import type { AnySQLiteColumn, SQLiteTable } from 'drizzle-orm/sqlite-core';
import { preparedQuery, type Db } from './client';
import { ApiError } from '../errors';

/**
 * OpenAI's cursor pagination over a `seq`-ordered table (assistants, a thread's messages): one page
 * in `order`; `after` continues past its id; `before` gives the page just before its id (read
 * backwards from it, then turned around), so following `first_id` with `before` walks back page by
 * page. One extra row tells whether more exist.
 *
 * A list asks for its page with a query of its own built from `PageQuery` (its bounds, order and
 * row count as placeholders) and prepared once per shape (preparedQueries in db/client.ts), and
 * finds its cursors with its table's `Cursors`: lists are read as often as runs are polled, and
 * Drizzle building a select's SQL cost more than the read.
 */
export async function cursorPage<Row>(
  query: CursorQuery,
  options: {
    db: Db;
    /** The list's table (see cursorsOf). */
    cursors: Cursors;
    /** Whose list it is: the value of the table's scope column (a thread's id, a workspace's). */
    scope: string;
    /** Rows of the caller's scope that also satisfy `page.where`, in `page.orderBy`, at most `page.limit`. */
    select: (page: PageQuery) => Promise<Row[]>;
    /** What the cursor names, for the error: "assistant", "message". */
    noun: string;
  },
): Promise<{ rows: Row[]; hasMore: boolean }> {
  const { cursors, db, scope } = options;
  // Whether each cursor is a row of the list, read beside the page (one round trip to a database
  // server), which finds the cursor's place itself (Cursors.seqAt); its error comes first.
  const found = (id: string | undefined) => (id === undefined ? undefined : cursors.seqOf(db, id, scope));
  const checks = [found(query.after), found(query.before)] as const;
  const ascending = query.order === 'asc';
  const hasAfter = query.after !== undefined;
  const hasBefore = query.before !== undefined;
  const backwards = hasBefore && !hasAfter;
  const { seq } = cursors;
  const after = cursors.seqAt(sql.placeholder('after'), sql.placeholder('cursorScope'));
  const before = cursors.seqAt(sql.placeholder('before'), sql.placeholder('cursorScope'));
  const reading = options.select({
    shape: `${ascending ? 'asc' : 'desc'}${hasAfter ? ' after' : ''}${hasBefore ? ' before' : ''}`,
    where: and(
      hasAfter ? (ascending ? gt(seq, after) : lt(seq, after)) : undefined,
      hasBefore ? (ascending ? lt(seq, before) : gt(seq, before)) : undefined,
    ),
    orderBy: ascending !== backwards ? asc(seq) : desc(seq),
    limit: sql.placeholder('limit'),
    values: { after: query.after, before: query.before, cursorScope: scope, limit: query.limit + 1 },
  });
  for (const read of [...checks, reading]) read?.catch(() => undefined);
  for (const [index, param] of (['after', 'before'] as const).entries()) {
    const id = query[param];
    if (id !== undefined && (await checks[index]) === undefined) {
      throw new ApiError('invalid_value', `Invalid '${param}': no ${options.noun} found with id '${id}'.`, { param });
    }
  }
  const rows = await reading;
  const page = rows.slice(0, query.limit);
  if (backwards) page.reverse();
  return { rows: page, hasMore: rows.length > query.limit };
}

/** What a list is asked for: http/schemas.ts's cursorListQuery, validated. */
export interface CursorQuery {
  limit: number;
  order: 'asc' | 'desc';
  after?: string | undefined;
  before?: string | undefined;
}

/** One page's query, as cursorPage asks a list for it. */
export interface PageQuery {
  /** What the page's SQL depends on (its order and which cursors it has): a prepared query per shape. */
  shape: string;
  /** The cursors' bounds on `seq`, as placeholders, or undefined. */
  where: SQL | undefined;
  orderBy: SQL;
  /** The row count, as a placeholder. */
  limit: Placeholder;
  /** The placeholders' values, to execute the query with (beside the list's own). */
  values: { after: string | undefined; before: string | undefined; cursorScope: string; limit: number };
}

/** How a list's table orders its rows and finds a cursor's place in them (cursorsOf). */
export interface Cursors {
  /** The order: the table's `seq`. */
  seq: AnySQLiteColumn;
  /** The seq of the row `id` in the list of `scope`, or undefined when that list has no such row. */
  seqOf(db: Db, id: string, scope: string): Promise<number | undefined>;
  /** The same as SQL, for a page's query: the seq of the row `id` of the list `scope` (NULL if none). */
  seqAt(id: Placeholder, scope: Placeholder): SQL;
}

/**
 * The cursors of a list over `table`: rows ordered by `seq`, a cursor being a row's `id` and a list
 * being the rows with one value of `scope` (a thread's messages: `thread_id`). The seq of a cursor is
 * read with one query, prepared once per database.
 */
export function cursorsOf(
  table: SQLiteTable,
  columns: { seq: AnySQLiteColumn<{ data: number }>; id: AnySQLiteColumn; scope: AnySQLiteColumn },
): Cursors {
  const seqOfId = preparedQuery((db) =>
    db
      .select({ seq: columns.seq })
      .from(table)
      .where(and(eq(columns.id, sql.placeholder('id')), eq(columns.scope, sql.placeholder('scope'))))
      .limit(1)
      .prepare(),
  );
  return {
    seq: columns.seq,
    async seqOf(db, id, scope) {
      const [row] = await seqOfId(db).all({ id, scope });
      return row?.seq ?? undefined;
    },
    seqAt: (id, scope) =>
      sql`(select ${columns.seq} from ${table} where ${columns.id} = ${id} and ${columns.scope} = ${scope})`,
  };
}
