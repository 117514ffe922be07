import type { Provider } from '../schemas/virtual-keys';
import type { ChatCompletionRequest } from './types';

/**
 * One adapter per kind of upstream, behind one shape: where to send a Chat Completions request and
 * how to authenticate it. The body is the same OpenAI wire format for all of them.
 */
export interface ProviderAdapter {
  url(baseUrl: string, options: Record<string, string | undefined>): string;
  headers(secret: string): Record<string, string>;
  /** Adjusts the body where a provider departs from OpenAI's. */
  body(request: ChatCompletionRequest): ChatCompletionRequest;
}

const trimSlash = (url: string) => url.replace(/\/+$/, '');

/** OpenAI and every OpenAI-compatible server: vLLM, Ollama, llama.cpp, Groq, OpenRouter, … */
const openaiCompatible: ProviderAdapter = {
  url: (baseUrl) => `${trimSlash(baseUrl)}/chat/completions`,
  headers: (secret) => ({ authorization: `Bearer ${secret}` }),
  body: (request) => request,
};

/** Azure OpenAI: the deployment is in the path, the version in the query, the key in `api-key`. */
const azureOpenai: ProviderAdapter = {
  url: (baseUrl, options) =>
    `${trimSlash(baseUrl)}/openai/deployments/${encodeURIComponent(options.deployment ?? '')}/chat/completions?api-version=${encodeURIComponent(options.api_version ?? '')}`,
  headers: (secret) => ({ 'api-key': secret }),
  // The deployment decides the model; Azure ignores `model` in the body but tolerates it.
  body: (request) => request,
};

export const ADAPTERS: Record<Provider, ProviderAdapter> = {
  openai: openaiCompatible,
  'azure-openai': azureOpenai,
};
