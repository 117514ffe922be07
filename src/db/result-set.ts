import type { ResultSet, Row } from '@libsql/client';

/**
 * A statement's answer as @libsql/client's `ResultSet`, for the clients of our own (the embedded
 * file's, embedded-client.ts; a server's over HTTP, http-client.ts): rows answer by index and by
 * column name, and only the names are enumerable (Drizzle reads a row either way).
 */

/** Rows of one column list share a prototype that answers by index and has the length. */
export interface RowShape {
  names: string[];
  /** Whether a column name is the first of its name (a later duplicate answers by index only). */
  firstOfName: boolean[];
  prototype: object;
}

const VALUES = Symbol('values');

export function rowShape(names: string[]): RowShape {
  const prototype = {};
  names.forEach((_name, index) => {
    Object.defineProperty(prototype, index, {
      get(this: { [VALUES]: unknown[] }) {
        return this[VALUES][index];
      },
    });
  });
  Object.defineProperty(prototype, 'length', { value: names.length });
  const seen = new Set<string>();
  const firstOfName = names.map((name) => {
    if (seen.has(name)) return false;
    seen.add(name);
    return true;
  });
  return { names, firstOfName, prototype };
}

export function toRow(shape: RowShape, values: unknown[]): Row {
  const row = Object.create(shape.prototype) as Record<string | symbol, unknown>;
  Object.defineProperty(row, VALUES, { value: values });
  for (let i = 0; i < values.length; i++) {
    const name = shape.names[i];
    if (name !== undefined && shape.firstOfName[i]) row[name] = values[i];
  }
  return row as unknown as Row;
}

export class Result implements ResultSet {
  constructor(
    readonly columns: string[],
    readonly columnTypes: string[],
    readonly rows: Row[],
    readonly rowsAffected: number,
    readonly lastInsertRowid: bigint | undefined,
  ) {}

  toJSON() {
    return {
      columns: this.columns,
      columnTypes: this.columnTypes,
      rows: this.rows.map((row) => Array.prototype.slice.call(row)),
      rowsAffected: this.rowsAffected,
      lastInsertRowid: this.lastInsertRowid === undefined ? null : String(this.lastInsertRowid),
    };
  }
}
