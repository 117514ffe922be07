import { and, asc, desc, gt, lt, type SQL } from 'drizzle-orm';
import type { SQLiteColumn } from 'drizzle-orm/sqlite-core';
import { ApiError } from '../errors';
import type { CursorListQuery } from '../schemas/common';

/**
 * OpenAI's cursor pagination over a `seq`-ordered table (assistants, a thread's messages): one page
 * in `order`; `after` continues past its id; `before` gives the page just before its id (read
 * backwards from it, then turned around), so following `first_id` with `before` walks back page by
 * page. One extra row tells whether more exist.
 */
export async function cursorPage<Row>(
  query: CursorListQuery,
  options: {
    seq: SQLiteColumn;
    /** The seq of a cursor id within the caller's scope, or undefined when there is none. */
    seqOf: (id: string) => Promise<number | undefined>;
    /** Rows of the caller's scope that also satisfy `where`, in `orderBy`, at most `limit`. */
    select: (where: SQL | undefined, orderBy: SQL, limit: number) => Promise<Row[]>;
    /** What the cursor names, for the error: "assistant", "message". */
    noun: string;
  },
): Promise<{ rows: Row[]; hasMore: boolean }> {
  const cursor = async (id: string | undefined, param: 'after' | 'before') => {
    if (id === undefined) return undefined;
    const seq = await options.seqOf(id);
    if (seq === undefined) {
      throw new ApiError('invalid_value', `Invalid '${param}': no ${options.noun} found with id '${id}'.`, { param });
    }
    return seq;
  };
  const ascending = query.order === 'asc';
  const afterSeq = await cursor(query.after, 'after');
  const beforeSeq = await cursor(query.before, 'before');
  const backwards = beforeSeq !== undefined && afterSeq === undefined;
  const { seq } = options;
  const rows = await options.select(
    and(
      afterSeq === undefined ? undefined : ascending ? gt(seq, afterSeq) : lt(seq, afterSeq),
      beforeSeq === undefined ? undefined : ascending ? lt(seq, beforeSeq) : gt(seq, beforeSeq),
    ),
    ascending !== backwards ? asc(seq) : desc(seq),
    query.limit + 1,
  );
  const page = rows.slice(0, query.limit);
  if (backwards) page.reverse();
  return { rows: page, hasMore: rows.length > query.limit };
}

