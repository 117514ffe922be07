import type { Client, InArgs, InStatement, Replicated, ResultSet, Transaction, TransactionMode } from '@libsql/client';

/**
 * A libSQL client in front of another, passing everything through: what a client that changes how
 * statements are sent (busy-retry.ts, coalescing-client.ts) extends, overriding only that.
 */
export class WrappedClient implements Client {
  protected readonly inner: Client;

  constructor(inner: Client) {
    this.inner = inner;
  }

  execute(stmt: InStatement): Promise<ResultSet>;
  execute(sql: string, args?: InArgs): Promise<ResultSet>;
  execute(stmt: InStatement | string, args?: InArgs): Promise<ResultSet> {
    return typeof stmt === 'string' ? this.inner.execute(stmt, args) : this.inner.execute(stmt);
  }

  batch(stmts: Array<InStatement | [string, InArgs?]>, mode?: TransactionMode): Promise<ResultSet[]> {
    return this.inner.batch(stmts, mode);
  }

  migrate(stmts: InStatement[]): Promise<ResultSet[]> {
    return this.inner.migrate(stmts);
  }

  transaction(mode?: TransactionMode): Promise<Transaction> {
    return this.inner.transaction(mode);
  }

  executeMultiple(sql: string): Promise<void> {
    return this.inner.executeMultiple(sql);
  }

  sync(): Promise<Replicated> {
    return this.inner.sync();
  }

  close(): void {
    this.inner.close();
  }

  reconnect(): void {
    this.inner.reconnect();
  }

  get closed(): boolean {
    return this.inner.closed;
  }

  get protocol(): string {
    return this.inner.protocol;
  }
}
