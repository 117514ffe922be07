/**
 * What the Worker's bundle takes for `@libsql/client/http` (wrangler.toml's `[alias]`). The Worker
 * speaks to the database through its own client (db/http-client.ts); Drizzle's libsql/http driver,
 * given that client, never makes one of its own, but imports @libsql/client's `createClient` for
 * when it is given a URL, and with it the whole Hrana client. Here, making one is refused.
 */
export function createClient(): never {
  throw new Error("The Worker makes its database client itself (src/db/http-client.ts), not @libsql/client's.");
}
