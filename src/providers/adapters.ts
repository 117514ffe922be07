import type { ChatCompletionRequest, UpstreamFetch } from './types';

/** The kinds of upstream a virtual key names (its `provider`): one adapter each. */
export const PROVIDERS = ['openai', 'azure-openai'] as const;
export type Provider = (typeof PROVIDERS)[number];

/** The provider's endpoints the gateway calls, as their paths under the base URL. */
export const UPSTREAM_OPERATIONS = ['chat/completions', 'completions', 'embeddings', 'moderations', 'models'] as const;
export type UpstreamOperation = (typeof UPSTREAM_OPERATIONS)[number];

/**
 * One adapter per kind of upstream, behind one shape: where to send a request for one of its
 * operations and how to authenticate it. The body is the same OpenAI wire format for all of them.
 */
export interface ProviderAdapter {
  url(baseUrl: string, options: Record<string, string | undefined>, operation: UpstreamOperation): string;
  headers(secret: string): Record<string, string>;
  /** Adjusts the body where a provider departs from OpenAI's. */
  body(request: ChatCompletionRequest): ChatCompletionRequest;
}

/** Where and as whom a virtual key's provider is called: the client, the adapter, the key's base URL, options and secret. */
export interface ProviderTarget {
  fetch: UpstreamFetch;
  adapter: ProviderAdapter;
  baseUrl: string;
  options: Record<string, string | undefined>;
  secret: string;
}

const trimSlash = (url: string) => url.replace(/\/+$/, '');

/** OpenAI and every OpenAI-compatible server: vLLM, Ollama, llama.cpp, Groq, OpenRouter, … */
const openaiCompatible: ProviderAdapter = {
  url: (baseUrl, _options, operation) => `${trimSlash(baseUrl)}/${operation}`,
  headers: (secret) => ({ authorization: `Bearer ${secret}` }),
  body: (request) => request,
};

/** Azure OpenAI: the deployment is in the path, the version in the query, the key in `api-key`. */
const azureOpenai: ProviderAdapter = {
  // Each model is a deployment of its own (an embeddings model too): a virtual key whose deployment
  // serves it. Azure's /models lists what the resource could deploy, not what this deployment serves.
  url: azureUrl,
  headers: (secret) => ({ 'api-key': secret }),
  // The deployment decides the model; Azure ignores `model` in the body but tolerates it.
  body: (request) => request,
};

function azureUrl(baseUrl: string, options: Record<string, string | undefined>, operation: UpstreamOperation): string {
  const deployment = encodeURIComponent(options.deployment ?? '');
  return `${trimSlash(baseUrl)}/openai/deployments/${deployment}/${operation}?api-version=${encodeURIComponent(options.api_version ?? '')}`;
}

export const ADAPTERS: Record<Provider, ProviderAdapter> = {
  openai: openaiCompatible,
  'azure-openai': azureOpenai,
};
