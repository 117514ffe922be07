/** The list object of OpenAI's paginated endpoints, from a page of rows (db/pagination.ts). */
export function listObject<Row, Json extends { id: string }>(
  page: { rows: Row[]; hasMore: boolean },
  toJson: (row: Row) => Json,
) {
  const data = page.rows.map(toJson);
  return {
    object: 'list' as const,
    data,
    first_id: data[0]?.id ?? null,
    last_id: data[data.length - 1]?.id ?? null,
    has_more: page.hasMore,
  };
}
