/**
 * What the Worker's bundle takes for drizzle-orm's `pg-core/columns/enum.js` (wrangler.toml's
 * `[alias]`). Drizzle's SQL builder (sql/sql.js) imports `isPgEnum` from it, and with it the
 * Postgres column classes it extends: 1.5 KiB of the gzipped script for a check that is never true
 * of a SQLite schema. This is the same check, on the same global symbol, without the classes.
 */
const IS_PG_ENUM: unique symbol = Symbol.for('drizzle:isPgEnum');

export function isPgEnum(value: unknown): boolean {
  return typeof value === 'function' && IS_PG_ENUM in value && value[IS_PG_ENUM] === true;
}
