"""A small AG-UI agent that shows the whole context API, offline.

First run: a step, a reasoning block, a message, a tool call whose state update lands
between its arguments and its result, a subagent with work of its own, and finally a
tool call that needs a person's approval, so the run ends with an interrupt.

Second run (a resume on the same thread): the client sends back the conversation and the
answer; the agent checks that the resume answers exactly the open interrupt, starts with a
`MESSAGES_SNAPSHOT` (so the result it sends refers to a known call), and finishes.

Run it with `tiller demo`, or from code:

```python
from tiller.events import run_agent
from tiller.examples.agui_tour import WeatherTour

async for event in run_agent(WeatherTour(), {"threadId": "t1", "runId": "r1", "messages": [...]}):
    ...
```
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from tiller.events import (
    APPROVAL_SCHEMA,
    AgUiContext,
    Interrupt,
    MessageLog,
    RunOutcome,
    approval_interrupt_id,
)

__all__ = ["TourState", "WeatherTour"]

_FORECASTS: dict[str, tuple[str, int]] = {
    "oslo": ("snow", -2),
    "lisbon": ("sun", 17),
    "tokyo": ("rain", 11),
}


class Forecast(BaseModel):
    city: str
    sky: str
    high_c: int


class TourState(BaseModel):
    """The agent's typed state, shared with the client."""

    city: str = "Oslo"
    forecast: Forecast | None = None
    status: str = "idle"
    log: list[str] = Field(default_factory=list)


class WeatherArgs(BaseModel):
    city: str


class WeatherTour:
    """Looks up a forecast, asks a subagent for advice, and asks before publishing."""

    state_type = TourState

    async def run(self, ctx: AgUiContext[TourState]) -> RunOutcome | None:
        if ctx.is_resume:
            return await self._resume(ctx)
        return await self._first_run(ctx)

    async def _first_run(self, ctx: AgUiContext[TourState]) -> RunOutcome:
        ctx.state_mut().status = "planning"
        ctx.publish_state()
        city = _city_from(ctx.last_user_text) or ctx.state.city

        with ctx.step("plan"):
            ctx.think(f"The user wants the weather in {city}: look it up, ask before publishing.")
            ctx.say(f"Let me check the weather in {city}.")

        with ctx.step("lookup"), ctx.tool_call("get_weather") as call:
            call.args_json({"city": city})
            call.end()
            args = call.parse_args(WeatherArgs)
            await asyncio.sleep(0)  # a real tool would await I/O here
            sky, high_c = _FORECASTS.get(args.city.lower(), _FORECASTS["oslo"])
            forecast = Forecast(city=args.city, sky=sky, high_c=high_c)

            def record(state: TourState) -> None:
                state.forecast = forecast
                state.status = "looked up"
                state.log.append(f"forecast for {forecast.city}")

            ctx.update_state(record)  # between the call's arguments and its result
            call.result(forecast.model_dump())

        with ctx.subagent("stylist", description="suggests what to wear") as stylist:
            with ctx.step("advise"):
                advice = "a warm coat" if forecast.high_c < 5 else "a light jacket"
                ctx.say(f"For {forecast.sky} at {forecast.high_c}°C, wear {advice}.")
            stylist.finish_with({"advice": advice})

        ctx.say("I'd like to publish this report; please approve.")
        with ctx.tool_call("publish_report") as publish:
            publish.args_json(
                {"city": forecast.city, "summary": f"{forecast.sky}, {forecast.high_c}°C"}
            )
        ctx.state_mut().status = "awaiting approval"
        return RunOutcome.interrupt(
            Interrupt(
                id=approval_interrupt_id(publish.id),
                reason="tool_call",
                message=f"Publish the weather report for {forecast.city}?",
                tool_call_id=publish.id,
                response_schema=APPROVAL_SCHEMA,
            )
        )

    async def _resume(self, ctx: AgUiContext[TourState]) -> RunOutcome:
        history = MessageLog(m.model_dump(by_alias=True, exclude_none=True) for m in ctx.messages)
        pending = [
            c for c in history.pending_tool_calls() if c["function"]["name"] == "publish_report"
        ]
        open_ids = [approval_interrupt_id(c["id"]) for c in pending]
        answers = ctx.check_resume(open_ids)  # InvalidResume -> RUN_ERROR, nothing runs
        ctx.messages_snapshot(history.messages)
        for call in pending:
            answer = answers[approval_interrupt_id(call["id"])]
            payload = answer.payload if isinstance(answer.payload, dict) else {}
            approved = answer.is_resolved and payload.get("decision") in (
                "approve",
                "approve_always",
            )
            if approved:
                ctx.tool_result(call["id"], "published")
                ctx.state_mut().status = "published"
                ctx.say("Published the report.")
            else:
                reason = payload.get("reason") or "no reason given"
                ctx.tool_result(call["id"], f"user denied: {reason}")
                ctx.state_mut().status = "not published"
                ctx.say(f"Understood, I won't publish it ({reason}).")
        ctx.publish_state()
        return RunOutcome.success()


def _city_from(text: str | None) -> str | None:
    if not text:
        return None
    for city in _FORECASTS:
        if city in text.lower():
            return city.capitalize()
    return None
