import type { Db } from '../db/client';
import { loadActivePolicies, readPolicyVersion } from '../services/policies';
import { PolicyIndex, toActivePolicy } from './matching';

interface Entry {
  version: number;
  index: PolicyIndex;
}

/**
 * The active policies of recently seen workspaces, indexed for matching, one cache per process
 * (Node) or isolate (Workers). Every lookup first reads the workspace's policy version (one
 * primary-key read), which triggers on the policies table bump in the same transaction as any
 * change, wherever it comes from: a change made by this process, another gateway or the CLI governs
 * the very next request. A changed version reloads the workspace's policies once, however many
 * requests ask for them at the same moment.
 */
export class PolicyCache {
  readonly #db: Db;
  readonly #maxPolicies: number;
  /** In least-recently-used order: a hit moves its workspace to the end. */
  readonly #entries = new Map<string, Entry>();
  readonly #loading = new Map<string, Promise<Entry>>();
  /** The weight of every entry: its policies, and at least 1, so that empty workspaces count too. */
  #weight = 0;

  /**
   * @param options.maxPolicies the most policies kept over all workspaces (a workspace without
   *   any counts as one): beyond it the least recently used workspaces are dropped; the one just
   *   loaded stays, however large.
   */
  constructor(db: Db, options: { maxPolicies?: number } = {}) {
    this.#db = db;
    this.#maxPolicies = options.maxPolicies ?? 200_000;
  }

  async get(workspaceId: string): Promise<PolicyIndex> {
    const version = await readPolicyVersion(this.#db, workspaceId);
    const cached = this.#entries.get(workspaceId);
    if (cached && cached.version >= version) {
      this.#entries.delete(workspaceId);
      this.#entries.set(workspaceId, cached);
      return cached.index;
    }
    return (await this.#load(workspaceId, version)).index;
  }

  async #load(workspaceId: string, atLeast: number): Promise<Entry> {
    let pending = this.#loading.get(workspaceId);
    if (!pending) {
      const started = this.#fetch(workspaceId).finally(() => {
        if (this.#loading.get(workspaceId) === started) this.#loading.delete(workspaceId);
      });
      this.#loading.set(workspaceId, (pending = started));
    }
    const entry = await pending;
    // A load that began before the change this caller saw: load once more.
    return entry.version >= atLeast ? entry : this.#load(workspaceId, atLeast);
  }

  async #fetch(workspaceId: string): Promise<Entry> {
    const { version, policies } = await loadActivePolicies(this.#db, workspaceId);
    const entry: Entry = { version, index: new PolicyIndex(policies.map(toActivePolicy)) };
    const current = this.#entries.get(workspaceId);
    if (!current || current.version <= version) {
      this.#remove(workspaceId);
      this.#entries.set(workspaceId, entry);
      this.#weight += weight(entry);
      for (const oldest of this.#entries.keys()) {
        if (this.#weight <= this.#maxPolicies || oldest === workspaceId) break;
        this.#remove(oldest);
      }
    }
    return entry;
  }

  #remove(workspaceId: string) {
    const entry = this.#entries.get(workspaceId);
    if (!entry) return;
    this.#entries.delete(workspaceId);
    this.#weight -= weight(entry);
  }

  /** The policies held now, counting a workspace without any as one. */
  get weight(): number {
    return this.#weight;
  }
}

const weight = (entry: Entry) => Math.max(1, entry.index.size);
