import { pgEnum } from 'drizzle-orm/pg-core';
import { isPgEnum as drizzles } from 'drizzle-orm/pg-core/columns/enum';
import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { isPgEnum } from '../../../src/runtime/workers/drizzle-pg-enum';
import { runs } from '../../../src/db/schema';

/** The Worker's stand-in for Drizzle's `isPgEnum` (wrangler.toml's [alias]) answers as Drizzle's own. */
describe("the Worker's isPgEnum", () => {
  const values: [string, unknown][] = [
    ['a Postgres enum', pgEnum('mood', ['happy', 'sad'])],
    ['a SQLite table', runs],
    ['a column', runs.id],
    ['an SQL chunk', sql`1`],
    ['a function', () => 1],
    ['an object', { [Symbol.for('drizzle:isPgEnum')]: true }],
    ['null', null],
    ['a string', 'mood'],
  ];
  it.each(values)('answers as drizzle-orm for %s', (_name, value) => {
    expect(isPgEnum(value)).toBe(drizzles(value));
  });
  it('knows a Postgres enum', () => {
    expect(isPgEnum(pgEnum('mood', ['happy']))).toBe(true);
  });
});
