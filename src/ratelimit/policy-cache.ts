import type { Db } from '../db/client';
import { loadActivePolicies, readPolicyVersion } from '../services/policies';
import { PolicyIndex, toActivePolicy } from './matching';

/** Reads a workspace's active policies and their version: loadActivePolicies, unless a test injects a fault. */
export type PolicyLoader = typeof loadActivePolicies;

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
  readonly #loadPolicies: PolicyLoader;
  /** In least-recently-used order: a hit moves its workspace to the end. */
  readonly #entries = new Map<string, Entry>();
  readonly #loading = new Map<string, Promise<Entry>>();
  /** The weight of every entry: its policies, and at least 1, so that empty workspaces count too. */
  #weight = 0;

  /**
   * @param options.maxPolicies the most policies kept over all workspaces (a workspace without
   *   any counts as one): beyond it the least recently used workspaces are dropped; the one just
   *   loaded stays, however large.
   * @param options.load how a workspace's policies are read (default: loadActivePolicies).
   */
  constructor(db: Db, options: { maxPolicies?: number; load?: PolicyLoader } = {}) {
    this.#db = db;
    this.#maxPolicies = options.maxPolicies ?? 200_000;
    this.#loadPolicies = options.load ?? loadActivePolicies;
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

  /**
   * The workspace's entry at `atLeast` or newer, sharing a load already under way. A shared load
   * belongs to the request that started it: on Workers, when that request is cancelled its I/O
   * fails, and the requests waiting on it would fail with it. So a caller whose shared load failed
   * loads once more on its own, and only the failure of its own load is its failure.
   */
  async #load(workspaceId: string, atLeast: number, own = false): Promise<Entry> {
    const shared = own ? undefined : this.#loading.get(workspaceId);
    let entry: Entry;
    if (shared) {
      try {
        entry = await shared;
      } catch {
        return this.#load(workspaceId, atLeast, true);
      }
    } else {
      entry = await this.#start(workspaceId);
    }
    // A load that began before the change this caller saw: load once more.
    return entry.version >= atLeast ? entry : this.#load(workspaceId, atLeast, own);
  }

  /** A load of this caller's own, which later callers share while it is the latest under way. */
  #start(workspaceId: string): Promise<Entry> {
    const started = this.#fetch(workspaceId).finally(() => {
      if (this.#loading.get(workspaceId) === started) this.#loading.delete(workspaceId);
    });
    this.#loading.set(workspaceId, started);
    return started;
  }

  async #fetch(workspaceId: string): Promise<Entry> {
    const { version, policies } = await this.#loadPolicies(this.#db, workspaceId);
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
