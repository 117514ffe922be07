/** undici's Agent class from its own module, which runtime/node/upstream-fetch.ts loads without undici's index. */
declare module 'undici/lib/dispatcher/agent.js' {
  import type { Agent } from 'undici';
  const UndiciAgent: typeof Agent;
  export default UndiciAgent;
}
