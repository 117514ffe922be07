"""OpenAI's Assistants quickstart, unchanged but for where the client points.

The client is configured the usual way and nothing else: the gateway's URL and a gateway API key,

    OPENAI_BASE_URL=http://127.0.0.1:8787/v1 OPENAI_API_KEY=gk_... python3 examples/python/quickstart.py

and the gateway picks the provider from the model (a virtual key whose `models` match it, or the
workspace's default virtual key).
"""

import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])

assistant = client.beta.assistants.create(
    name="Math Tutor",
    instructions="You are a personal math tutor. Answer math questions briefly.",
    model="gpt-4o",
)
thread = client.beta.threads.create()
client.beta.threads.messages.create(
    thread_id=thread.id,
    role="user",
    content="I need to solve the equation `3x + 11 = 14`. Can you help me?",
)

run = client.beta.threads.runs.create_and_poll(
    thread_id=thread.id,
    assistant_id=assistant.id,
    instructions="Please address the user as Jane Doe. The user has a premium account.",
)
print(f"run {run.id}: {run.status}")
if run.status != "completed":
    raise SystemExit(f"the run ended {run.status}: {run.last_error}")

# Oldest first, as a conversation reads.
for message in client.beta.threads.messages.list(thread_id=thread.id, order="asc"):
    for part in message.content:
        if part.type == "text":
            print(f"{message.role}: {part.text.value}")

client.beta.threads.delete(thread.id)
client.beta.assistants.delete(assistant.id)
