import type { InitResult } from '../resources/identities/organisations';

/** The one printing of freshly created keys, by `npm start` on an empty database and by `init`. */
export function formatInitResult(result: InitResult): string {
  return [
    'Initialised the gateway. The two API keys below are shown this once: store them now.',
    '',
    `  organisation_id       ${result.organisation_id}`,
    `  workspace_id          ${result.workspace_id} (slug: ${result.workspace_slug})`,
    `  organisation API key  ${result.organisation_api_key}`,
    `  workspace API key     ${result.workspace_api_key}`,
    '',
    "Send a key as 'Authorization: Bearer <key>' (OPENAI_API_KEY) or in the x-gateway-api-key header.",
    'A workspace key acts on its workspace; an organisation key acts on any workspace of the',
    'organisation and names it (workspace_id).',
    '',
  ].join('\n');
}

/** Rows as an aligned text table, for the CLI's human output. */
export function formatTable(rows: Record<string, unknown>[], columns: string[]): string {
  if (rows.length === 0) return '(none)\n';
  const cells = rows.map((row) => columns.map((column) => stringify(row[column])));
  const widths = columns.map((column, i) => Math.max(column.length, ...cells.map((line) => line[i]?.length ?? 0)));
  const render = (line: string[]) =>
    line
      .map((cell, i) => cell.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [render(columns), ...cells.map(render)].join('\n') + '\n';
}

function stringify(value: unknown): string {
  if (value === null || value === undefined) return '-';
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}
