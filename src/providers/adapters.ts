import type { ChatCompletionRequest } from './types';

/** The kinds of upstream a virtual key names (its `provider`): one adapter each. */
export const PROVIDERS = ['openai', 'azure-openai'] as const;
export type Provider = (typeof PROVIDERS)[number];

/**
 * One adapter per kind of upstream, behind one shape: where to send a Chat Completions request and
 * how to authenticate it. The body is the same OpenAI wire format for all of them.
 */
export interface ProviderAdapter {
  url(baseUrl: string, options: Record<string, string | undefined>): string;
  /** Where an embeddings request goes (providers/embeddings.ts); the same authentication. */
  embeddingsUrl(baseUrl: string, options: Record<string, string | undefined>): string;
  headers(secret: string): Record<string, string>;
  /** Adjusts the body where a provider departs from OpenAI's. */
  body(request: ChatCompletionRequest): ChatCompletionRequest;
}

const trimSlash = (url: string) => url.replace(/\/+$/, '');

/** OpenAI and every OpenAI-compatible server: vLLM, Ollama, llama.cpp, Groq, OpenRouter, … */
const openaiCompatible: ProviderAdapter = {
  url: (baseUrl) => `${trimSlash(baseUrl)}/chat/completions`,
  embeddingsUrl: (baseUrl) => `${trimSlash(baseUrl)}/embeddings`,
  headers: (secret) => ({ authorization: `Bearer ${secret}` }),
  body: (request) => request,
};

/** Azure OpenAI: the deployment is in the path, the version in the query, the key in `api-key`. */
const azureOpenai: ProviderAdapter = {
  url: (baseUrl, options) => azureUrl(baseUrl, options, 'chat/completions'),
  // An embeddings model is a deployment of its own: a virtual key whose deployment serves it.
  embeddingsUrl: (baseUrl, options) => azureUrl(baseUrl, options, 'embeddings'),
  headers: (secret) => ({ 'api-key': secret }),
  // The deployment decides the model; Azure ignores `model` in the body but tolerates it.
  body: (request) => request,
};

function azureUrl(baseUrl: string, options: Record<string, string | undefined>, operation: string): string {
  const deployment = encodeURIComponent(options.deployment ?? '');
  return `${trimSlash(baseUrl)}/openai/deployments/${deployment}/${operation}?api-version=${encodeURIComponent(options.api_version ?? '')}`;
}

export const ADAPTERS: Record<Provider, ProviderAdapter> = {
  openai: openaiCompatible,
  'azure-openai': azureOpenai,
};
