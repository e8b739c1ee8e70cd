"""An MCP client made with the official MCP Python SDK (2.x) for file-agent's long calls: the
Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) and cancellation. It prints one
JSON line per event, flushed, so that a test can act while the call runs.

The SDK 2.x has no tasks runtime of its own, but its client takes extensions that claim a
result shape (`ResultClaim`) and sends any request (`session.send_request`), stamping each with
the client's capabilities; this script's `Tasks` extension is that: it declares the extension on
every request, claims `resultType: "task"` and polls `tasks/get`.

The endpoint is a Streamable HTTP URL, or `stdio:COMMAND` (shell-quoted) to start COMMAND as a
stdio server.

Commands (after the endpoint and any `--header K=V`):
  cancel-call --code CODE [--legacy]
      run_python with CODE; once its progress says the sandbox runs it, the call is cancelled
      the SDK's way: over the 2025-11-25 handshake (`--legacy`) the SDK POSTs
      `notifications/cancelled`; over 2026-07-28 it aborts the request's POST.
      -> {"event": "running"}, then --delay seconds later {"event": "cancelled"}, then
      waits --linger seconds.
  task --tool T --args JSON [--cancel-when-running [--cancel-on TEXT]]
      calls T declaring the extension, expects a task, polls it to its end (cancelling it once
      its status message holds TEXT, "sandbox" unless told).
      -> {"event": "created", "task": {...}}, {"event": "status", "status", "statusMessage"}
         (each change), {"event": "cancel-sent"}, {"event": "end", "task": {...}}
  get --task-id ID | cancel --task-id ID
      tasks/get or tasks/cancel, declaring the extension.
      -> {"ok": true, "task": {...}} or {"ok": false, "code", "message"}
  call --tool T --args JSON
      a plain call, without the extension: -> {"result": {...}}
"""

import argparse
import asyncio
import json
import shlex
import time
from typing import Any, Literal

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClientExtension, ClaimContext, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Request, Result
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")


def emit(**event) -> None:
    print(json.dumps(event), flush=True)


class CreateTaskResult(Result):
    """`resultType: "task"`: the seed state of a task (its fields are kept as they came)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]


class AnyResult(Result):
    """Any result, its fields kept as they came (tasks/get's task, tasks/cancel's ack)."""

    model_config = ConfigDict(extra="allow")


class TaskRequest(Request[dict[str, Any], str]):
    """tasks/get or tasks/cancel; the SDK sets `Mcp-Name` from `taskId`, as SEP-2663 asks."""

    name_param = "taskId"


def dumped(result: Result) -> dict:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def task_request(session, method: str, task_id: str) -> dict:
    request = TaskRequest(method=method, params={"taskId": task_id})
    return dumped(await session.send_request(request, AnyResult))


class Tasks(ClientExtension):
    """Declares the extension, and finishes a task by polling it (cancelling it, if asked,
    once the sandbox runs it)."""

    identifier = TASKS

    def __init__(
        self, cancel_when_running: bool = False, poll: float = 0.2, cancel_on: str = "sandbox"
    ) -> None:
        self.cancel_when_running = cancel_when_running
        self.poll = poll
        self.cancel_on = cancel_on

    def claims(self):
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.resolve)]

    async def resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        task = dumped(created)
        emit(event="created", task=task)
        task_id, seen, cancel_sent = task["taskId"], None, False
        while task["status"] not in TERMINAL:
            await anyio.sleep(self.poll)
            task = await task_request(ctx.session, "tasks/get", task_id)
            now = (task["status"], task.get("statusMessage"))
            if now != seen:
                seen = now
                emit(event="status", status=now[0], statusMessage=now[1])
            running = self.cancel_on in (task.get("statusMessage") or "")
            if self.cancel_when_running and running and not cancel_sent:
                await task_request(ctx.session, "tasks/cancel", task_id)
                cancel_sent = True
                emit(event="cancel-sent")
        emit(event="end", task=task)
        result = task.get("result") or {"content": [], "isError": True}
        return CallToolResult.model_validate(result)


async def cancel_call(client: Client, code: str, delay: float, linger: float) -> None:
    running = anyio.Event()

    async def progress(done: float, total: float | None, message: str | None) -> None:
        if message and "sandbox" in message:
            running.set()

    async with anyio.create_task_group() as group:

        async def call() -> None:
            await client.call_tool("run_python", {"code": code}, progress_callback=progress)
            emit(event="answered")

        group.start_soon(call)
        with anyio.fail_after(60):
            await running.wait()
        emit(event="running")
        # Past the container's start: the attempt is under way when the cancel comes.
        await anyio.sleep(delay)
        group.cancel_scope.cancel()
    emit(event="cancelled", at=time.time())
    await anyio.sleep(linger)


async def one_request(client: Client, method: str, task_id: str) -> None:
    try:
        emit(ok=True, task=await task_request(client.session, method, task_id))
    except MCPError as error:
        emit(ok=False, code=error.error.code, message=error.error.message)


async def run(client: Client, args) -> None:
    """The command, on a connected client."""
    if args.command == "cancel-call":
        await cancel_call(client, args.code, args.delay, args.linger)
    elif args.command in ("task", "call"):
        result = await client.call_tool(args.tool, json.loads(args.args))
        emit(event="result", result=dumped(result))
    else:
        await one_request(client, f"tasks/{args.command}", args.task_id)


async def main(args) -> None:
    headers = dict(header.split("=", 1) for header in args.header)
    extensions = []
    if args.command == "task":
        extensions = [Tasks(cancel_when_running=args.cancel_when_running, cancel_on=args.cancel_on)]
    elif args.command in ("get", "cancel"):
        extensions = [Tasks()]
    mode = "legacy" if getattr(args, "legacy", False) else "auto"
    if args.url.startswith("stdio:"):
        command = shlex.split(args.url.removeprefix("stdio:"))
        server = StdioServerParameters(command=command[0], args=command[1:])
        async with Client(server, mode=mode, extensions=extensions or None) as client:
            await run(client, args)
        return
    async with create_mcp_http_client(headers=headers or None) as http_client:
        transport = streamable_http_client(args.url, http_client=http_client)
        async with Client(transport, mode=mode, extensions=extensions or None) as client:
            await run(client, args)


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--header", action="append", default=[])
    commands = parser.add_subparsers(dest="command", required=True)
    cancel = commands.add_parser("cancel-call")
    cancel.add_argument("--code", required=True)
    cancel.add_argument("--legacy", action="store_true")
    cancel.add_argument("--delay", type=float, default=2.0)
    cancel.add_argument("--linger", type=float, default=3.0)
    for name in ("task", "call"):
        command = commands.add_parser(name)
        command.add_argument("--tool", required=True)
        command.add_argument("--args", default="{}")
        if name == "task":
            command.add_argument("--cancel-when-running", action="store_true")
            command.add_argument("--cancel-on", default="sandbox")
    for name in ("get", "cancel"):
        commands.add_parser(name).add_argument("--task-id", required=True)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
