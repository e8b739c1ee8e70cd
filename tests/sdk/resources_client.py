"""An MCP client made with the official MCP Python SDK that uses file-agent's files the MCP way:
it runs a plan of steps against the server and prints one JSON line per step.

Over stdio (`--stdio BINARY`, the server started as a desktop client starts it, with
`--env K=V`), the client declares `--root` folders as its roots; over HTTP (`URL`), it sends
`--header K=V`.

A plan is a JSON list of steps:
  {"call": TOOL, "args": {...}}  -> {"is_error", "text", "content": [{"type", "uri", "name",
                                     "mimeType", "size", "sha256", "length"}]}
  {"read": URI}                  -> {"ok", "mimeType", "sha256", "length"} or {"ok": false,
                                     "error"}
  {"list": true}                 -> {"uris": [...]}
A string "{{i.j}}" anywhere in a step is replaced by the URI of resource link j of step i's
result.
"""

import argparse
import asyncio
import base64
import hashlib
import json
import re
from pathlib import Path

from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def digest(data: bytes) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "length": len(data)}


def described(item) -> dict:
    kind = item.type
    if kind == "text":
        return {"type": kind}
    if kind == "resource_link":
        return {
            "type": kind,
            "uri": str(item.uri),
            "name": item.name,
            "mimeType": item.mime_type,
            "size": item.size,
        }
    if kind == "image":
        return {"type": kind, "mimeType": item.mime_type, **digest(base64.b64decode(item.data))}
    return {"type": kind}


def substitute(step, results):
    text = json.dumps(step)

    def link(match):
        i, j = int(match.group(1)), int(match.group(2))
        links = [c for c in results[i]["content"] if c["type"] == "resource_link"]
        return links[j]["uri"]

    return json.loads(re.sub(r"\{\{(\d+)\.(\d+)\}\}", link, text))


async def run(session: ClientSession, plan: list) -> None:
    results = []
    for step in plan:
        step = substitute(step, results)
        if "call" in step:
            result = await session.call_tool(step["call"], step.get("args", {}))
            out = {
                "is_error": bool(result.is_error),
                "text": "".join(getattr(item, "text", "") for item in result.content),
                "content": [described(item) for item in result.content],
            }
        elif "read" in step:
            try:
                read = await session.read_resource(step["read"])
                contents = read.contents[0]
                data = (
                    base64.b64decode(contents.blob)
                    if hasattr(contents, "blob")
                    else contents.text.encode()
                )
                out = {"ok": True, "mimeType": contents.mime_type, "uri": str(contents.uri), **digest(data)}
            except Exception as error:  # the server's JSON-RPC error
                out = {"ok": False, "error": str(error)}
        else:
            listed = await session.list_resources()
            out = {"uris": [str(resource.uri) for resource in listed.resources]}
        results.append(out)
        print(json.dumps(out), flush=True)


async def main(args) -> None:
    plan = json.loads(Path(args.plan).read_text())
    if args.stdio:
        roots = [types.Root(uri=Path(root).resolve().as_uri(), name="root") for root in args.root]

        async def list_roots(context) -> types.ListRootsResult:
            return types.ListRootsResult(roots=roots)

        server = StdioServerParameters(
            command=args.stdio,
            args=["serve", "--stdio"],
            env=dict(pair.split("=", 1) for pair in args.env),
        )
        async with stdio_client(server) as streams:
            async with ClientSession(
                streams[0], streams[1], list_roots_callback=list_roots if roots else None
            ) as session:
                await asyncio.wait_for(session.initialize(), timeout=20)
                await run(session, plan)
    else:
        headers = dict(header.split("=", 1) for header in args.header)
        async with create_mcp_http_client(headers=headers or None) as http_client, streamable_http_client(
            args.url, http_client=http_client
        ) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await asyncio.wait_for(session.initialize(), timeout=20)
                await run(session, plan)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url", nargs="?")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--stdio")
    parser.add_argument("--root", action="append", default=[])
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--header", action="append", default=[])
    asyncio.run(main(parser.parse_args()))
