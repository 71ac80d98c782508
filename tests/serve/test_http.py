"""The AG-UI endpoint over real HTTP: status codes, streams, disconnects, auth."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tiller.examples.console_agent import make_agent
from tiller.loop import Agent
from tiller.model.scripted import ScriptedModel
from tiller.tools import tool

from .conftest import AUTH, SSE, parse_sse, post_run, run_input, types, wait_for

HELLO = [{"id": "u1", "role": "user", "content": "hello"}]


def _post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{url}/agui", content=body, headers=headers, timeout=30)


def test_a_run_streams_valid_events_starting_with_the_conversation(
    serve: Callable[..., str],
) -> None:
    url = serve(make_agent())
    events = post_run(url, run_input("t1", "r1", HELLO))
    assert types(events)[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    assert events[0]["protocolVersion"] == "1.0"
    assert events[1]["messages"] == HELLO  # the client's own messages, ids and all
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "You said: hello"
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "success"}


def test_bad_requests_get_their_status_codes(serve: Callable[..., str]) -> None:
    url = serve(make_agent(), max_body=4096)
    good = orjson.dumps(run_input("t1", "r1", HELLO))
    assert _post(url, b"{not json", SSE).status_code == 400
    invalid = _post(url, orjson.dumps({"threadId": 5}), SSE)
    assert invalid.status_code == 400
    assert "RunAgentInput" in invalid.json()["error"]
    orphan = run_input(
        "t1", "r1", [*HELLO, {"id": "x", "role": "tool", "toolCallId": "nope", "content": "?"}]
    )
    illegal = _post(url, orjson.dumps(orphan), SSE)
    assert illegal.status_code == 400
    assert "nope" in illegal.json()["error"]
    assert _post(url, good, {**SSE, "Content-Type": "text/plain"}).status_code == 415
    big = run_input("t1", "r1", [{"id": "u1", "role": "user", "content": "x" * 5000}])
    assert _post(url, orjson.dumps(big), SSE).status_code == 413
    assert _post(url, good, {**SSE, "Accept": "application/json"}).status_code == 406
    assert httpx.get(f"{url}/agui", headers=AUTH).status_code == 405
    assert httpx.put(f"{url}/agui", headers=AUTH).status_code == 405
    assert httpx.get(f"{url}/runs/none", headers=AUTH).status_code == 404
    slashed = _post(url, orjson.dumps(run_input("t1", "thread/t1", HELLO)), SSE)
    assert slashed.status_code == 400  # ids become store keys: no '/'
    assert "runId" in slashed.json()["error"]


def test_a_run_id_is_used_once(serve: Callable[..., str]) -> None:
    url = serve(make_agent())
    post_run(url, run_input("t1", "r1", HELLO))
    again = _post(url, orjson.dumps(run_input("t2", "r1", HELLO)), SSE)
    assert again.status_code == 400
    assert "already in use" in again.json()["error"]


def test_the_token_is_required_except_for_the_console(serve: Callable[..., str]) -> None:
    url = serve(make_agent())
    body = orjson.dumps(run_input("t1", "r1", HELLO))
    no_token = {key: value for key, value in SSE.items() if key != "Authorization"}
    assert _post(url, body, no_token).status_code == 401
    assert _post(url, body, {**no_token, "Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{url}/runs").status_code == 401
    console = httpx.get(f"{url}/")
    assert console.status_code == 200
    assert console.headers["content-type"].startswith("text/html")


def test_no_token_when_the_app_is_made_without_one(serve: Callable[..., str]) -> None:
    url = serve(make_agent(), token=None)
    headers = {key: value for key, value in SSE.items() if key != "Authorization"}
    assert _post(url, orjson.dumps(run_input("t1", "r1", HELLO)), headers).status_code == 200


def test_a_failed_run_is_200_with_run_error(serve: Callable[..., str]) -> None:
    broken = Agent(ScriptedModel([]), name="broken")  # the script is empty: the model errs
    url = serve(broken)
    events = post_run(url, run_input("t1", "r1", HELLO))
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "MODEL_ERROR"


def _status(url: str, run_id: str) -> dict[str, object]:
    response = httpx.get(f"{url}/runs/{run_id}", headers=AUTH)
    return dict(response.json()) if response.status_code == 200 else {}


def test_a_client_disconnect_cancels_only_its_own_run(
    serve: Callable[..., str], tmp_path: Path
) -> None:
    url = serve(make_agent(step_delay=0.3), keep_alive=0.2)
    slow = orjson.dumps(run_input("t1", "r1", [{"id": "u1", "role": "user", "content": "slow 20"}]))
    other = orjson.dumps(run_input("t2", "r2", [{"id": "u1", "role": "user", "content": "slow 3"}]))
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{url}/agui", content=other, headers=SSE) as kept,
    ):
        with client.stream("POST", f"{url}/agui", content=slow, headers=SSE) as response:
            for line in response.iter_lines():
                if "TOOL_CALL_RESULT" in line:
                    break  # one step done: hang up
        stopped = wait_for(
            lambda: _status(url, "r1").get("status") == "finished" and _status(url, "r1"),
            what="the abandoned run to stop",
        )
        assert stopped["stopCause"] == "cancelled"
        body = b"".join(kept.iter_bytes()).decode()
    assert '"outcome":{"type":"success"}' in body  # the other run went on to the end
    assert_valid_agui(parse_sse(body), max_warnings=0)


def test_a_detached_run_survives_its_client_and_can_be_reattached(
    serve: Callable[..., str],
) -> None:
    url = serve(make_agent(step_delay=0.2))
    body = run_input(
        "t1",
        "r1",
        [{"id": "u1", "role": "user", "content": "slow 3"}],
        forwardedProps={"tiller": {"detach": True}},
    )
    with httpx.Client(timeout=30) as client:
        with client.stream(
            "POST", f"{url}/agui", content=orjson.dumps(body), headers=SSE
        ) as response:
            for line in response.iter_lines():
                if "STEP_STARTED" in line:
                    break
        with client.stream("GET", f"{url}/runs/r1/events?after=0", headers=AUTH) as replay:
            text = b"".join(replay.iter_bytes()).decode()
    assert text.startswith("id: 0\ndata: ")
    assert_valid_agui(parse_sse(text), max_warnings=0)
    assert '"type":"RUN_STARTED"' in text
    assert "Finished all steps." in text.replace('","', "") or "Finished" in text
    assert '"outcome":{"type":"success"}' in text
    assert _status(url, "r1")["stopCause"] == "completed"


def test_keep_alive_comments_flow_while_the_run_is_quiet(serve: Callable[..., str]) -> None:
    url = serve(make_agent(step_delay=0.4), keep_alive=0.05)
    body = orjson.dumps(run_input("t1", "r1", [{"id": "u1", "role": "user", "content": "slow 1"}]))
    raw = _post(url, body, SSE).text
    assert ": keep-alive\n\n" in raw  # the model's 0.4 s pause was filled with comments
    assert '"type":"RUN_FINISHED"' in raw


def test_cors_lets_the_configured_origin_in(serve: Callable[..., str]) -> None:
    url = serve(make_agent(), cors_origins=["https://app.example"])
    preflight = httpx.options(
        f"{url}/agui",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    stranger = httpx.options(
        f"{url}/agui",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in stranger.headers


def test_a_run_id_sent_twice_at_once_starts_one_run(serve: Callable[..., str]) -> None:
    import concurrent.futures

    url = serve(make_agent(first_delay=0.2))
    body = orjson.dumps(run_input("t1", "r1", HELLO))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        codes = sorted(pool.map(lambda _: _post(url, body, SSE).status_code, range(2)))
    assert codes == [200, 400]


def test_one_run_at_a_time_on_a_thread(serve: Callable[..., str]) -> None:
    url = serve(make_agent(step_delay=0.2))
    slow = orjson.dumps(run_input("t1", "r1", [{"id": "u1", "role": "user", "content": "slow 40"}]))
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{url}/agui", content=slow, headers=SSE) as first,
    ):
        lines = first.iter_lines()
        for line in lines:
            if "STEP_STARTED" in line:
                break
        # The second waits a moment (a run that just ended may still hold the thread),
        # then is refused, saying who holds it.
        second = post_run(url, run_input("t1", "r2", HELLO))
        assert types(second) == ["RUN_STARTED", "RUN_ERROR"]
        assert second[-1]["code"] == "THREAD_BUSY"
        assert "r1" in second[-1]["message"]
        assert client.post(f"{url}/runs/r1/cancel", json={}, headers=AUTH).status_code == 202
        rest = "\n".join(lines)
    assert '"outcome":{"type":"cancelled"}' in rest
    # Once the first is over, the thread takes the next run.
    assert post_run(url, run_input("t1", "r3", HELLO))[-1]["type"] == "RUN_FINISHED"


def test_a_run_sent_right_after_the_last_ends_finds_the_thread_free(
    serve: Callable[..., str],
) -> None:
    """As @ag-ui/client does with a frontend tool's result: the next request the moment
    the stream ends."""
    url = serve(make_agent())
    for n in range(10):
        events = post_run(url, run_input("t1", f"r{n}", HELLO))
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]


def test_a_cancelled_run_is_closed_and_the_thread_goes_on(serve: Callable[..., str]) -> None:
    url = serve(make_agent(step_delay=0.3))
    body = run_input("t1", "r1", [{"id": "u1", "role": "user", "content": "slow 30"}])
    with httpx.Client(timeout=30) as client:
        seen: list[str] = []
        with client.stream(
            "POST", f"{url}/agui", content=orjson.dumps(body), headers=SSE
        ) as response:
            lines = response.iter_lines()
            for line in lines:
                seen.append(line)
                if "TOOL_CALL_START" in line:
                    break  # a call is under way
            assert client.post(f"{url}/runs/r1/cancel", json={}, headers=AUTH).status_code == 202
            seen.extend(lines)
    events = parse_sse("\n".join(seen))
    assert events[-1]["outcome"] == {"type": "cancelled"}
    run = wait_for(
        lambda: _status(url, "r1").get("status") == "finished" and _status(url, "r1"),
        what="the cancelled run's checkpoint",
    )
    assert run["stopCause"] == "cancelled"
    assert run["interrupts"] == []
    # The client never got a result for the cancelled call: the server fills it in.
    calls = [
        {
            "id": e["toolCallId"],
            "type": "function",
            "function": {"name": e["toolCallName"], "arguments": "{}"},
        }
        for e in events
        if e["type"] == "TOOL_CALL_START"
    ]
    answered = {e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
    history = [{"id": "u1", "role": "user", "content": "slow 30"}]
    for call in calls:
        history.append({"id": f"a-{call['id']}", "role": "assistant", "toolCalls": [call]})
        if call["id"] in answered:
            history.append(
                {"id": f"t-{call['id']}", "role": "tool", "toolCallId": call["id"], "content": "ok"}
            )
    history.append({"id": "u2", "role": "user", "content": "hello again"})
    events = post_run(url, run_input("t1", "r2", history))
    assert events[-1]["outcome"] == {"type": "success"}


def test_every_api_route_needs_the_token(serve: Callable[..., str]) -> None:
    url = serve(make_agent())
    post_run(url, run_input("t1", "r1", HELLO))
    for method, path in [
        ("GET", "/runs"),
        ("GET", "/runs/r1"),
        ("GET", "/runs/r1/events"),
        ("POST", "/runs/r1/steer"),
        ("POST", "/runs/r1/cancel"),
        ("POST", "/agui"),
        ("POST", "/"),
    ]:
        response = httpx.request(method, f"{url}{path}", json={"text": "x"})
        assert response.status_code == 401, (method, path)
    # A token that is not ASCII is just wrong, not a server error.
    odd = httpx.get(f"{url}/runs", headers={"Authorization": "Bearer t\u00e9st".encode()})
    assert odd.status_code == 401
    assert httpx.get(f"{url}/console/console.js").status_code == 200  # the console is public


def test_without_a_token_only_loopback_host_names_are_answered(serve: Callable[..., str]) -> None:
    url = serve(make_agent(), token=None)
    assert httpx.get(f"{url}/runs").status_code == 200
    rebound = httpx.get(f"{url}/runs", headers={"Host": "attacker.example"})
    assert rebound.status_code == 421
    assert httpx.get(f"{url}/runs", headers={"Host": "localhost:8000"}).status_code == 200


def test_a_chunked_body_over_the_limit_is_413(serve: Callable[..., str]) -> None:
    url = serve(make_agent(), max_body=4096)
    big = orjson.dumps(run_input("t1", "r1", [{"id": "u1", "role": "user", "content": "x" * 9000}]))

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000]

    response = httpx.post(f"{url}/agui", content=chunks(), headers=SSE, timeout=30)
    assert response.status_code == 413


def test_events_resume_from_an_index_or_the_last_event_id(serve: Callable[..., str]) -> None:
    url = serve(make_agent())
    events = post_run(url, run_input("t1", "r1", HELLO))
    whole = httpx.get(f"{url}/runs/r1/events", headers=AUTH).text
    assert parse_sse(whole) == events
    ids = [int(line[4:]) for line in whole.splitlines() if line.startswith("id: ")]
    assert ids == list(range(len(events)))
    skipped = parse_sse(httpx.get(f"{url}/runs/r1/events?after=3", headers=AUTH).text)
    assert skipped == events[3:]
    reconnect = httpx.get(f"{url}/runs/r1/events", headers={**AUTH, "Last-Event-ID": "3"})
    assert parse_sse(reconnect.text) == events[4:]


def test_head_and_get_on_the_root_only_ever_give_the_page(serve: Callable[..., str]) -> None:
    url = serve(make_agent())
    body = orjson.dumps(run_input("t1", "r1", HELLO))
    no_token = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    for method in ("HEAD", "GET"):
        response = httpx.request(method, f"{url}/", content=body, headers=no_token)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
    assert httpx.get(f"{url}/runs", headers=AUTH).json()["runs"] == []  # nothing ran


@tool(read_only=True)
def clock() -> str:
    """The time, as a fixed string."""
    return "noon"


# Module level, as an app defines its agent: every request the server takes runs on it.
CLOCK_AGENT = Agent(
    ScriptedModel(
        [
            {"tool_calls": [{"name": "clock"}]},
            {"tool_calls": [{"name": "clock"}]},
            "It is noon.",
        ]
    ),
    [clock],
)


def test_a_module_level_scripted_agent_answers_every_request_from_its_first_turn(
    serve: Callable[..., str],
) -> None:
    url = serve(CLOCK_AGENT)
    for run_id in ("r1", "r2"):  # the second was "the script has no turn 4"
        events = post_run(url, run_input(f"t-{run_id}", run_id, HELLO))
        assert_valid_agui(events, max_warnings=0)
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert text == "It is noon."
