# The interpreter of one sandbox session (runtime/node/sandbox.ts starts it inside bubblewrap as
# `python3 -c <this file> <limits>`). It sets the session's limits on itself, which every process it
# starts inherits and none can raise, then serves calls one at a time: a request on standard input (a
# JSON line, then as many bytes as it says), the answer as one JSON line on fd 3. The code's output
# goes to fd 1 (fd 2 is made the same pipe, so the two stay in order), read and bounded by the
# gateway; after each call a token the gateway chose ends the call's output there.
#
# Nothing here is trusted by the gateway: the code runs in this very process and may replace any of
# it. It can only spoil its own session's answers, which the gateway bounds and checks.

import ast
import base64
import io
import json
import os
import resource
import signal
import sys
import traceback

limits = json.loads(sys.argv[1])
sys.argv = [""]

# Before anything the code could reach: the limits, then a low priority, both inherited by every
# process the code starts. RLIMIT_NPROC counts the session's own processes and threads: bubblewrap
# gives the session a user namespace of its own, whose count starts at zero.
for name, value in (
    ("RLIMIT_NPROC", limits["processes"]),
    ("RLIMIT_AS", limits["memory"]),
    ("RLIMIT_CPU", limits["cpu"]),
    ("RLIMIT_FSIZE", limits["fsize"]),
    ("RLIMIT_NOFILE", limits["nofile"]),
    ("RLIMIT_CORE", 0),
    ("RLIMIT_MEMLOCK", 0),
):
    resource.setrlimit(getattr(resource, name), (value, value))
os.nice(19)

output = os.dup(1)
requests = os.fdopen(0, "rb", buffering=0)
answers = os.fdopen(3, "wb", buffering=0)
os.set_inheritable(3, False)
HEADER_BYTES = 64 * 1024
DATA = "/mnt/data"


def answer(value):
    answers.write(json.dumps(value).encode() + b"\n")


def read_exactly(size):
    parts = []
    while size > 0:
        part = requests.read(min(size, 1 << 20))
        if not part:
            sys.exit(0)
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


# Loaded before the first call, so that calls do not pay for them; what they print as they load is
# no call's output.
os.dup2(os.open("/dev/null", os.O_WRONLY), 1)
os.dup2(1, 2)
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy  # noqa: E402, F401
import pandas  # noqa: E402, F401

os.dup2(output, 1)
os.dup2(output, 2)
os.close(output)

# Agg shows nothing: a figure shown is a figure left open, given back after the call.
plt.show = lambda *args, **kwargs: None

os.chdir(DATA)
namespace = {"__name__": "__main__", "__builtins__": __builtins__}


def snapshot():
    """Every regular file under /mnt/data, by path: its size and modification time."""
    seen = {}
    for root, dirs, files in os.walk(DATA):
        for name in files:
            path = os.path.join(root, name)
            try:
                stat = os.lstat(path)
            except OSError:
                continue
            if os.path.isfile(path) and not os.path.islink(path):
                seen[path] = (stat.st_size, stat.st_mtime_ns)
    return seen


def execute(code):
    """Runs the code; the last expression's value is printed, as a notebook shows it."""
    tree = ast.parse(code, "<code>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<code>", "exec"), namespace)
    if last is not None:
        value = eval(compile(last, "<code>", "eval"), namespace)
        if value is not None:
            print(repr(value))


def figures(room):
    images, dropped = [], 0
    for number in plt.get_fignums():
        buffer = io.BytesIO()
        try:
            plt.figure(number).savefig(buffer, format="png")
        except Exception:
            dropped += 1
            continue
        data = buffer.getvalue()
        if len(images) < limits["images"] and len(data) <= room:
            images.append(base64.b64encode(data).decode())
            room -= len(data)
        else:
            dropped += 1
    plt.close("all")
    return images, dropped, room


def changed_files(before, room):
    files, dropped = [], 0
    for path, state in sorted(snapshot().items()):
        if before.get(path) == state:
            continue
        if len(files) >= limits["files"] or state[0] > room:
            dropped += 1
            continue
        try:
            with open(path, "rb") as file:
                data = file.read(room + 1)
        except OSError:
            dropped += 1
            continue
        if len(data) > room:
            dropped += 1
            continue
        files.append({"path": os.path.relpath(path, DATA), "bytes": base64.b64encode(data).decode()})
        room -= len(data)
    return files, dropped


def run(code, token):
    before = snapshot()
    result = {"status": "ok"}
    try:
        execute(code)
    except BaseException as error:  # SystemExit and KeyboardInterrupt end the call, not the session
        result = {"status": "error", "error": {"name": type(error).__name__, "value": str(error)[:4096]}}
        # The traceback from the code's own frames: the driver's are no concern of the code's author.
        frames = error.__traceback__
        while frames is not None and frames.tb_frame.f_code.co_filename != "<code>":
            frames = frames.tb_next
        traceback.print_exception(type(error), error, frames)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    # What the code started ends with its call: nothing of it runs, or holds the CPU, between calls.
    # In the session's PID namespace, -1 is every process but this one and bubblewrap's init.
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    # Reaped, or its zombies would count against the session's processes from one call to the next.
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    room = limits["file_bytes"]
    result["images"], dropped_images, room = figures(room)
    result["files"], dropped_files = changed_files(before, room)
    result["dropped"] = {"images": dropped_images, "files": dropped_files}
    os.write(1, token.encode())
    answer(result)


def put(name, data):
    # Written beside, then renamed: a name the code made a link or a directory is replaced, not followed.
    temporary = os.path.join(DATA, ".put-" + os.urandom(8).hex())
    with open(temporary, "xb") as file:
        file.write(data)
    os.replace(temporary, os.path.join(DATA, name))


answer({"ready": True})
while True:
    header = requests.readline(HEADER_BYTES)
    if not header:
        break
    request = json.loads(header)
    data = read_exactly(int(request["size"]))
    if request["op"] == "run":
        run(data.decode("utf-8", "replace"), request["token"])
    elif request["op"] == "put":
        try:
            put(request["name"], data)
            answer({"ok": True})
        except OSError as error:
            answer({"ok": False, "message": error.strerror or str(error)})
