import { parseConfig, type Config } from '../../config';

/**
 * The configuration on Node: the schema Workers use too, with no default of Node's own (private
 * upstreams, which local model servers need, follow the database's workspaces on both).
 */
export function nodeConfig(env: Record<string, string | undefined>): Config {
  return parseConfig(env);
}
