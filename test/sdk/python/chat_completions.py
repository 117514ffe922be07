"""What an application's other calls do through the gateway with OpenAI's Python SDK, configured by
OPENAI_BASE_URL and OPENAI_API_KEY alone (test/sdk/python.test.ts runs it): a chat completion, one
streamed with its usage, a tool call, embeddings and the models. Prints one JSON object of what it saw.
"""

import json

from openai import OpenAI

client = OpenAI(max_retries=0)

completion = client.chat.completions.create(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "Name a colour."}],
    seed=7,
)

streamed = ""
usage = None
with client.chat.completions.create(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "Count to three."}],
    stream=True,
    stream_options={"include_usage": True},
) as stream:
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            streamed += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage.total_tokens

weather = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
tool_call = client.chat.completions.create(
    model="gpt-4o-mini",
    # The second line tells the test's fake provider to answer with this tool call.
    messages=[
        {
            "role": "user",
            "content": 'Weather in Oslo?\n#fake {"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo"}}]}',
        }
    ],
    tools=[weather],
)

embeddings = client.embeddings.create(model="text-embedding-3-small", input=["one", "two"], dimensions=8)
models = [model.id for model in client.models.list()]

print(
    json.dumps(
        {
            "completion": {
                "object": completion.object,
                "content": completion.choices[0].message.content,
                "total_tokens": completion.usage.total_tokens,
            },
            "streamed": {"content": streamed, "total_tokens": usage},
            "tool_call": {
                "finish_reason": tool_call.choices[0].finish_reason,
                "name": tool_call.choices[0].message.tool_calls[0].function.name,
                "arguments": tool_call.choices[0].message.tool_calls[0].function.arguments,
            },
            "embeddings": {
                "count": len(embeddings.data),
                "dimensions": len(embeddings.data[0].embedding),
                "prompt_tokens": embeddings.usage.prompt_tokens,
            },
            "models": models,
        }
    )
)
