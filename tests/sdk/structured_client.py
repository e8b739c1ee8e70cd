"""Checks file-agent's typed results with the official MCP Python SDK (2.x): output schemas,
structured content, icons.

Usage: target/test-python/bin/python3 tests/sdk/structured_client.py http://127.0.0.1:8000/mcp
       [--user-id ID] [--call TOOL=JSON]...
       target/test-python/bin/python3 tests/sdk/structured_client.py --stdio COMMAND [ARG]...

It lists the tools and checks that every built-in tool has an outputSchema (a valid JSON Schema
2020-12 object schema) and one SVG icon as a base64 data URI. Then it calls run_python, saves a
tool with an output schema (create_tool), finds it listed as `my_add` with that outputSchema,
calls it, lists the saved tools and deletes the tool; then each `--call TOOL=JSON` in order (a
`"{uri}"` in JSON stands for the first file URI of the previous call's structured content). Every
result's structuredContent is validated here with `jsonschema` against the tool's outputSchema
(the SDK validates it on its own too) and printed as `structured TOOL: JSON`. With --stdio it
starts COMMAND as a stdio server and does the same without the saved tool. Exits non-zero on any
failure. Run by the integration tests in tests/integration/structured.rs.
"""

import argparse
import asyncio
import base64
import json
import sys
import xml.etree.ElementTree as ElementTree

import jsonschema

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# The saved tool python_client.py checks, with an output schema of its own here.
from python_client import ADD, ADD_SCHEMA as ADD_INPUT

BUILT_IN = {
    "generate_file", "modify_file", "run_python", "analyze_file", "data_analysis_tool",
    "conduct_deep_research", "create_tool", "generate_tool", "list_tools", "delete_tool",
}

ADD_OUTPUT = {
    "type": "object",
    "properties": {"sum": {"type": "integer"}},
    "required": ["sum"],
    "additionalProperties": False,
}


def check_icon(name: str, icons) -> None:
    if not icons or len(icons) != 1:
        raise SystemExit(f"{name}: expected one icon, got {icons!r}")
    icon = icons[0]
    prefix = "data:image/svg+xml;base64,"
    if icon.mime_type != "image/svg+xml" or icon.sizes != ["any"] or not icon.src.startswith(prefix):
        raise SystemExit(f"{name}: not an inline SVG icon: {icon!r}")
    root = ElementTree.fromstring(base64.b64decode(icon.src[len(prefix):]))
    if root.tag != "{http://www.w3.org/2000/svg}svg":
        raise SystemExit(f"{name}: the icon's root is {root.tag}")


async def schemas(session: ClientSession) -> dict:
    """Each listed tool's output schema, checked for the built-in ones."""
    listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    for name in BUILT_IN & listed.keys():
        tool = listed[name]
        if tool.output_schema is None:
            raise SystemExit(f"{name} has no outputSchema")
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        if tool.output_schema.get("type") != "object":
            raise SystemExit(f"{name}: the outputSchema is not an object schema")
        check_icon(name, tool.icons)
    for name, tool in listed.items():
        if name.startswith("my_"):
            check_icon(name, tool.icons)
    print("schemas:", ",".join(sorted(name for name, tool in listed.items() if tool.output_schema)))
    return {name: tool.output_schema for name, tool in listed.items()}


async def call(session: ClientSession, known: dict, name: str, arguments: dict):
    """Calls `name`, validates its structured content against its output schema, prints it."""
    result = await session.call_tool(name, arguments)
    text = "".join(getattr(item, "text", "") for item in result.content)
    if result.is_error:
        print(f"{name} failed: {text}")
        raise SystemExit(f"{name} failed: {text}")
    schema = known.get(name)
    if schema is None:
        raise SystemExit(f"{name} has no output schema to validate against")
    if not isinstance(result.structured_content, dict):
        raise SystemExit(f"{name}: no structured content: {result!r}")
    jsonschema.Draft202012Validator(schema).validate(result.structured_content)
    print(f"structured {name}:", json.dumps(result.structured_content, sort_keys=True))
    return result.structured_content


async def saved_tool(session: ClientSession, known: dict) -> None:
    """create_tool with an output schema; my_add listed with it and called; list; delete."""
    await call(session, known, "create_tool", {
        "name": "add", "description": "Adds two integers.", "code": ADD,
        "input_schema": ADD_INPUT, "output_schema": ADD_OUTPUT,
    })
    known = await schemas(session)
    if known.get("my_add") != ADD_OUTPUT:
        raise SystemExit(f"my_add is listed with the output schema {known.get('my_add')!r}")
    await call(session, known, "my_add", {"a": 2, "b": 3})
    await call(session, known, "list_tools", {})
    await call(session, known, "delete_tool", {"name": "add"})


async def run(session: ClientSession, calls: list[str], with_saved_tool: bool) -> None:
    await asyncio.wait_for(session.initialize(), timeout=10)
    known = await schemas(session)
    await call(session, known, "run_python", {"code": "print(2 + 2)\nopen('/work/out/n.txt', 'w').write('4')"})
    if with_saved_tool:
        await saved_tool(session, known)
    uri = None
    for spec in calls:
        name, arguments = spec.split("=", 1)
        if uri is not None:
            arguments = arguments.replace("{uri}", uri)
        structured = await call(session, known, name, json.loads(arguments))
        files = structured.get("files") or []
        uri = files[0]["uri"] if files else uri


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url", nargs="?")
    parser.add_argument("--user-id")
    parser.add_argument("--call", action="append", default=[])
    parser.add_argument("--stdio", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.stdio:
        server = StdioServerParameters(command=args.stdio[0], args=args.stdio[1:])
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await run(session, args.call, with_saved_tool=False)
        return
    headers = {"X-OpenWebUI-User-Id": args.user_id} if args.user_id else None
    async with create_mcp_http_client(headers=headers) as http_client, streamable_http_client(
        args.url, http_client=http_client
    ) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await run(session, args.call, with_saved_tool=True)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except jsonschema.ValidationError as error:
        sys.exit(f"structured content does not fit its schema: {error}")
