"""What an MCP tool result becomes: the text the model reads.

An MCP result is a list of content blocks plus optional structured content. The model
gets text, so:

- text blocks are joined, one per line;
- images, audio and binary resources are *described* (kind, MIME type, size), never
  dumped: base64 would cost the model thousands of tokens and tell it nothing. Images
  are handed to the call's progress channel as artifacts, so a person's UI shows them;
- an embedded text resource is shown with its URI; a resource link is described;
- structured content goes to `ToolOutput.data` for the program, and is shown to the
  model as compact JSON only when no text block carries it already (the spec asks
  servers to send its JSON as text too, and repeating it would double the cost).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import orjson

from .._tool import ToolOutput

if TYPE_CHECKING:
    from mcp_types import CallToolResult

__all__ = ["ArtifactSink", "render_result"]

#: Receives (mime, data, caption) for an image the result carried.
ArtifactSink = Callable[[str, bytes, str], None]

#: Images larger than this are described but not forwarded as artifacts.
MAX_ARTIFACT_BYTES: Final = 5 * 1024 * 1024


def _decoded_size(data: str) -> int:
    """The number of bytes `data` (base64) encodes, without decoding it."""
    data = data.strip()
    return max(0, len(data) * 3 // 4 - data[-2:].count("="))


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def render_result(
    result: CallToolResult, *, tool: str, artifact: ArtifactSink | None = None
) -> ToolOutput:
    """`result` as a `ToolOutput`: its text for the model, its error flag, and its
    structured content as `data`. `artifact` receives the images (see the module
    docstring); `tool` names the tool in captions."""
    from mcp_types import (
        AudioContent,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    parts: list[str] = []
    has_text = False
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
            has_text = True
        elif isinstance(block, ImageContent):
            size = _decoded_size(block.data)
            parts.append(
                f"[an {block.mime_type} image of {_size(size)} from {tool}; it is shown to "
                "the user, not to you]"
            )
            if artifact is not None and size <= MAX_ARTIFACT_BYTES:
                try:
                    raw = base64.b64decode(block.data, validate=True)
                except (binascii.Error, ValueError):
                    parts[-1] = f"[an {block.mime_type} image from {tool}, with invalid data]"
                else:
                    artifact(block.mime_type, raw, f"image from {tool}")
        elif isinstance(block, AudioContent):
            parts.append(
                f"[{block.mime_type} audio of {_size(_decoded_size(block.data))}; not shown]"
            )
        elif isinstance(block, ResourceLink):
            details = ", ".join(
                part
                for part in (
                    block.mime_type,
                    _size(block.size) if block.size is not None else None,
                    block.description,
                )
                if part
            )
            parts.append(
                f"[resource link: {block.name} <{block.uri}>"
                + (f" ({details})]" if details else "]")
            )
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            mime = f" ({resource.mime_type})" if resource.mime_type else ""
            if isinstance(resource, TextResourceContents):
                parts.append(f"[resource <{resource.uri}>{mime}]\n{resource.text}")
                has_text = True
            else:
                size = _decoded_size(resource.blob)
                parts.append(f"[binary resource <{resource.uri}>{mime}, {_size(size)}; not shown]")
        else:  # a content type newer than this code
            parts.append(f"[{getattr(block, 'type', type(block).__name__)} content; not shown]")
    structured = result.structured_content
    if structured is not None and not has_text:
        parts.append(orjson.dumps(structured).decode("utf-8"))
    if parts:
        text = "\n".join(parts)
    elif result.is_error:
        text = f"{tool} reported an error without a message"
    else:
        text = f"{tool} returned no content"
    return ToolOutput(text, is_error=bool(result.is_error), data=structured)
