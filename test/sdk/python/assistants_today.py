"""What OpenAI's Python SDK does against the gateway before it takes `Authorization: Bearer` and
runs on a thread (test/sdk/python.test.ts runs it): the gateway's own headers, assistants, and a
thread created and run in one call, polled to the end. Prints one JSON object of what it saw.

Environment: OPENAI_BASE_URL, OPENAI_API_KEY (a gateway API key), GATEWAY_VIRTUAL_KEY (a slug).
"""

import json
import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ["OPENAI_BASE_URL"],
    api_key=os.environ["OPENAI_API_KEY"],
    default_headers={
        "x-gateway-api-key": os.environ["OPENAI_API_KEY"],
        "x-gateway-virtual-key": os.environ["GATEWAY_VIRTUAL_KEY"],
    },
)

assistant = client.beta.assistants.create(model="fake-model", name="Math Tutor", instructions="Answer briefly.")
retrieved = client.beta.assistants.retrieve(assistant.id)
listed = [item.id for item in client.beta.assistants.list(limit=100)]

run = client.beta.threads.create_and_run_poll(
    assistant_id=assistant.id,
    thread={"messages": [{"role": "user", "content": "What is 3 + 4?"}]},
    poll_interval_ms=50,
)
messages = client.beta.threads.messages.list(thread_id=run.thread_id, order="asc")
deleted = client.beta.assistants.delete(assistant.id)

print(
    json.dumps(
        {
            "assistant": {"id": assistant.id, "name": retrieved.name, "model": retrieved.model, "listed": assistant.id in listed},
            "run": {"status": run.status, "usage": run.usage.total_tokens if run.usage else None},
            "messages": [[message.role, message.content[0].text.value] for message in messages],
            "deleted": deleted.deleted,
        }
    )
)
