"""The registry's `/mcp` driven by the official MCP Python SDK (`mcp` on PyPI, pinned by
.ci/run in its own virtualenv), for tests/mcp.rs: a real client none of us wrote.

Usage: client.py SCENARIO WORLD_JSON

WORLD_JSON names the server (`url`, `token`), the protocol `mode` ("legacy": the 2025-11-25
initialize handshake; "auto": 2026-07-28's server/discover) and the sessions the Rust test laid
out. Each scenario asserts what it checks and prints one `ok …` line per step; any failure
raises, so the exit status is the verdict. The SDK itself checks every successful tool result's
structuredContent against the tool's output schema.
"""

import asyncio
import json
import os
import signal
import sys
import time

import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated

READ_TOOLS = ["list_sessions", "get_session", "get_liveness", "get_card", "find_peers"]
ACT_TOOLS = ["stop_session", "signal_session", "prune"]
PROBLEM = "urn:murmur-registry:problem:"


def step(text):
    print(f"ok {text}", flush=True)


def connect(world, http, **options):
    transport = streamable_http_client(world["url"] + "/mcp", http_client=http)
    return Client(transport, mode=world["mode"], **options)


def expected_version(world):
    return "2025-11-25" if world["mode"] == "legacy" else "2026-07-28"


async def rest(http, world, path):
    answer = await http.get(world["url"] + path)
    return answer.status_code, answer.json()


def problem_type(result):
    assert result.is_error, f"expected a refusal, got {result.structured_content}"
    return result.structured_content["type"].removeprefix(PROBLEM)


def check_text_is_the_json(result):
    """The text content is the very JSON of structuredContent."""
    assert len(result.content) == 1, result.content
    assert json.loads(result.content[0].text) == result.structured_content


async def tour(world):
    headers = {"Authorization": f"Bearer {world['token']}"}
    texts = []
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with connect(world, http) as client:
            await check_identity(client, world)
            await check_catalogue(client)
            await check_resources(client, world, http)
            texts += await check_read_tools(client, world, http)
            texts += await check_refusals(client, world)
            texts += await check_prune(client, world)
    secrets = [world["token"], world["door_token"]]
    for text in texts:
        for secret in secrets:
            assert secret not in text, "a secret reached a tool result"
    step(f"no secret in {len(texts)} results")


async def check_identity(client, world):
    assert client.protocol_version == expected_version(world), client.protocol_version
    info = client.server_info
    if info is not None:
        assert info.name == "murmur-registry", info
        assert info.version, info
    assert "find_peers" in (client.instructions or ""), client.instructions
    step(f"connected with {client.protocol_version}; instructions name find_peers")


async def check_catalogue(client):
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(tools) == sorted(READ_TOOLS + ACT_TOOLS), sorted(tools)
    for name in READ_TOOLS:
        hints = tools[name].annotations
        assert hints.read_only_hint is True and hints.destructive_hint is False, (name, hints)
    for name in ["stop_session", "signal_session"]:
        hints = tools[name].annotations
        assert hints.destructive_hint is True and hints.idempotent_hint is False, (name, hints)
    hints = tools["prune"].annotations
    assert hints.destructive_hint is True and hints.idempotent_hint is True, hints
    status = tools["list_sessions"].input_schema["properties"]["status"]
    assert status["type"] == "array", status
    for tool in tools.values():
        assert tool.output_schema["type"] == "object", tool.name
    step("tools/list: the eight tools, their annotations, array arguments, output schemas")


async def check_resources(client, world, http):
    uris = {resource.uri for resource in (await client.list_resources()).resources}
    assert "murmur://sessions" in uris, uris
    for session_id in world["live"]:
        assert f"murmur://sessions/{session_id}" in uris, (session_id, uris)
    templates = (await client.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == ["murmur://sessions/{session_id}"], templates
    session_id = world["live"][0]
    read = await client.read_resource(f"murmur://sessions/{session_id}")
    status, body = await rest(http, world, f"/sessions/{session_id}")
    assert status == 200 and json.loads(read.contents[0].text) == body, (read, body)
    listing = json.loads((await client.read_resource("murmur://sessions")).contents[0].text)
    assert {s["session_id"] for s in listing["sessions"]} >= set(world["live"]), listing
    for uri in ["murmur://nothing", "murmur://sessions/" + world["never"], "file:///etc/passwd"]:
        try:
            await client.read_resource(uri)
        except MCPError as error:
            assert error.error.code in (-32002, -32602), error.error
        else:
            raise AssertionError(f"{uri} was read")
    step("resources: listed, read as the REST routes answer, unknown ones refused")


async def check_read_tools(client, world, http):
    texts = []

    async def same_as_rest(tool, arguments, path):
        result = await client.call_tool(tool, arguments)
        assert not result.is_error, result
        check_text_is_the_json(result)
        status, body = await rest(http, world, path)
        assert status == 200 and result.structured_content == body, (tool, result, body)
        texts.append(result.content[0].text)

    for session_id in world["live"]:
        await same_as_rest("get_liveness", {"session_id": session_id},
                           f"/sessions/{session_id}/liveness")
        await same_as_rest("get_card", {"session_id": session_id}, f"/sessions/{session_id}/card")
        await same_as_rest("get_session", {"session_id": session_id}, f"/sessions/{session_id}")
    listed = await client.call_tool("list_sessions", {"status": ["live"], "include": ["card"]})
    check_text_is_the_json(listed)
    live = {s["session_id"] for s in listed.structured_content["sessions"]}
    assert live == set(world["live"]), (live, world["live"])
    assert all(s["card"] for s in listed.structured_content["sessions"]), listed
    texts.append(listed.content[0].text)
    peers = await client.call_tool("find_peers", {"skill": ["summarize"]})
    found = [s["session_id"] for s in peers.structured_content["sessions"]]
    assert found == [world["skilled"]], (found, world["skilled"])
    everyone = await client.call_tool("find_peers", {})
    assert len(everyone.structured_content["sessions"]) == len(world["live"]), everyone
    texts += [peers.content[0].text, everyone.content[0].text]
    gone = await client.call_tool("get_liveness", {"session_id": world["gone"]})
    assert gone.structured_content["state"] == "gone", gone
    hangs = await client.call_tool("get_liveness", {"session_id": world["hangs"]})
    assert hangs.structured_content["state"] == "unreachable", hangs
    texts += [gone.content[0].text, hangs.content[0].text]
    everything = await client.call_tool("list_sessions", {})
    texts.append(everything.content[0].text)
    step("read tools: the REST routes' JSON, structured and as text; filters as the routes'")
    return texts


async def check_refusals(client, world):
    texts = []

    async def refused(tool, arguments, expected):
        result = await client.call_tool(tool, arguments)
        kind = problem_type(result)
        assert kind == expected, (tool, arguments, kind, result.structured_content)
        assert result.structured_content["detail"], result
        check_text_is_the_json(result)
        texts.append(result.content[0].text)

    await refused("get_card", {"session_id": world["foreign"]}, "session-not-live")
    await refused("get_card", {"session_id": world["hangs"]}, "session-not-live")
    await refused("get_card", {"session_id": world["gone"]}, "session-not-live")
    await refused("get_liveness", {"session_id": world["never"]}, "not-found")
    await refused("get_liveness", {"session_id": "not a session"}, "invalid-session-id")
    await refused("list_sessions", {"status": ["bogus"]}, "invalid-query")
    await refused("list_sessions", {"status": "live"}, "bad-request")
    await refused("list_sessions", {"colour": ["red"]}, "bad-request")
    await refused("get_liveness", {}, "bad-request")
    await refused("signal_session", {"session_id": world["hangs"], "signal": "SIGHUP"},
                  "unknown-signal")
    await refused("stop_session", {"session_id": world["hangs"], "timeout": 301}, "invalid-query")
    await refused("prune", {"session_id": world["hangs"]}, "session-not-gone")
    try:
        await client.call_tool("no_such_tool", {})
    except MCPError as error:
        assert error.error.code == -32602, error.error
    else:
        raise AssertionError("an unknown tool was called")
    step("refusals: isError with the route's problem type and detail; unknown tool refused")
    return texts


async def check_prune(client, world):
    pruned = await client.call_tool("prune", {"session_id": world["gone"]})
    assert not pruned.is_error and pruned.structured_content["pruned"] is True, pruned
    again = await client.call_tool("prune", {"session_id": world["gone"]})
    assert problem_type(again) == "not-found", again
    everything = await client.call_tool("prune", {})
    assert not everything.is_error, everything
    assert everything.structured_content["pruned"] == [], everything
    step("prune: one gone record, then not found; prune-all finds nothing more")
    return [pruned.content[0].text, everything.content[0].text]


async def reused(world):
    """A record that names this test's own pid with a wrong start token: the pid changed hands,
    so the session is gone and nothing may be sent to the process holding it now."""
    headers = {"Authorization": f"Bearer {world['token']}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with connect(world, http) as client:
            arguments = {"session_id": world["reused"]}
            if world["tool"] == "signal_session":
                arguments["signal"] = "SIGKILL"
                result = await client.call_tool("signal_session", arguments)
                assert problem_type(result) == "already-gone", result.structured_content
                assert "nothing was sent" in result.structured_content["detail"], result
            else:
                arguments["timeout"] = 0
                result = await client.call_tool("stop_session", arguments)
                assert not result.is_error, result.structured_content
                assert result.structured_content["outcome"] == "already_gone", result
                assert result.structured_content["signal_sent"] is None, result
    step(f"a reused pid: {world['tool']} sent nothing")


async def stop(world):
    headers = {"Authorization": f"Bearer {world['token']}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with connect(world, http) as client:
            result = await client.call_tool(
                "stop_session", {"session_id": world["victim"], "timeout": 5, "door": False})
            assert not result.is_error, result.structured_content
            assert result.structured_content["outcome"] == "stopped", result
            assert result.structured_content["signal_sent"] == "SIGTERM", result
    step("stop_session: SIGTERM sent, the capsule gone")


async def subscribe(world):
    """Subscribe to one session, SIGKILL its capsule, time the update at the client."""
    uri = f"murmur://sessions/{world['victim']}"
    headers = {"Authorization": f"Bearer {world['token']}"}
    updated = asyncio.Event()
    list_changed = asyncio.Event()

    async def on_message(message):
        method = getattr(getattr(message, "root", message), "method", None)
        params = getattr(getattr(message, "root", message), "params", None)
        if method == "notifications/resources/updated" and getattr(params, "uri", None) == uri:
            updated.set()
        if method == "notifications/resources/list_changed":
            list_changed.set()

    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        if world["mode"] == "legacy":
            async with connect(world, http, message_handler=on_message) as client:
                for never in ["murmur://sessions/" + world["never"], "murmur://elsewhere"]:
                    try:
                        await client.session.subscribe_resource(never)
                    except MCPError:
                        pass
                    else:
                        raise AssertionError(f"subscribed to {never}")
                await client.session.subscribe_resource(uri)
                killed = time.monotonic()
                os.kill(world["victim_pid"], signal.SIGKILL)
                await asyncio.wait_for(updated.wait(), 10)
                took = time.monotonic() - killed
                await asyncio.wait_for(list_changed.wait(), 10)
        else:
            async with connect(world, http) as client:
                async with client.listen(resource_subscriptions=[uri],
                                         resources_list_changed=True) as events:
                    killed = time.monotonic()
                    os.kill(world["victim_pid"], signal.SIGKILL)
                    took = None
                    seen_list = False
                    async for event in events:
                        if isinstance(event, ResourceUpdated) and event.uri == uri:
                            took = took or time.monotonic() - killed
                        elif not isinstance(event, ResourceUpdated):
                            seen_list = True
                        if took is not None and seen_list:
                            break
    assert took < 1.0, f"the update came {took:.3f} s after SIGKILL"
    step(f"SIGKILL -> notifications/resources/updated in {took * 1000:.0f} ms, then list_changed")


SCENARIOS = {"tour": tour, "reused": reused, "stop": stop, "subscribe": subscribe}

if __name__ == "__main__":
    scenario, world = sys.argv[1], json.loads(sys.argv[2])
    asyncio.run(asyncio.wait_for(SCENARIOS[scenario](world), 120))
