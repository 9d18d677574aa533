"""Length-prefixed frames over pipes, with deadlines, between the evaluator's processes."""

from __future__ import annotations

import json
import os
import select
import struct
import time
from collections.abc import Sequence
from typing import Any

__all__ = [
    "FrameReader",
    "FrameTooLarge",
    "PeerClosed",
    "PeerTimeout",
    "WireError",
    "decode_json",
    "encode_json",
    "frame",
    "send_frames",
    "split_frames",
]

_HEADER = struct.Struct(">I")
_CHUNK = 1 << 16


class WireError(Exception):
    """A frame could not be exchanged with the other process."""


class PeerClosed(WireError):
    """The other end closed its pipe (usually: it died)."""


class PeerTimeout(WireError):
    """The other end did not read or write before the deadline."""


class FrameTooLarge(WireError):
    """A frame announced more bytes than the caller accepts."""


def encode_json(value: Any) -> bytes:
    """Serialise a JSON value for a frame (ASCII, so lone surrogates cannot break encoding)."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def decode_json(payload: bytes) -> Any:
    """Parse a JSON frame."""
    return json.loads(payload.decode("utf-8", errors="replace"))


def _remaining(deadline: float | None) -> float | None:
    """Seconds left before the deadline (None waits forever)."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise PeerTimeout("deadline passed")
    return left


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its length."""
    return _HEADER.pack(len(payload)) + payload


def send_frames(fd: int, frames: Sequence[bytes], deadline: float | None = None) -> None:
    """Write frames to a pipe; works on blocking and non-blocking descriptors."""
    data = memoryview(b"".join(frame(f) for f in frames))
    while data:
        _, writable, _ = select.select([], [fd], [], _remaining(deadline))
        if not writable:
            raise PeerTimeout("peer did not read in time")
        try:
            written = os.write(fd, data[:_CHUNK])
        except BlockingIOError:
            continue
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise PeerClosed("peer closed its end") from exc
        data = data[written:]


class FrameReader:
    """Reads whole frames from one pipe, keeping any surplus bytes for the next frame."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def _fill(self, deadline: float | None) -> None:
        """Read at least one more byte, or raise."""
        while True:
            readable, _, _ = select.select([self.fd], [], [], _remaining(deadline))
            if not readable:
                raise PeerTimeout("peer did not answer in time")
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:
                continue
            except ConnectionResetError as exc:
                raise PeerClosed("peer closed its end") from exc
            if not chunk:
                raise PeerClosed("peer closed its end")
            self._buffer += chunk
            return

    def read(self, deadline: float | None = None, limit: int = 1 << 30) -> bytes:
        """Return the next frame's payload."""
        while True:
            payload = self._take(limit)
            if payload is not None:
                return payload
            self._fill(deadline)

    def poll(self, limit: int = 1 << 30) -> bytes | None:
        """The next frame's payload if it has fully arrived, else None; never waits."""
        while True:
            payload = self._take(limit)
            if payload is not None:
                return payload
            readable, _, _ = select.select([self.fd], [], [], 0)
            if not readable:
                return None
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:
                return None
            except ConnectionResetError as exc:
                raise PeerClosed("peer closed its end") from exc
            if not chunk:
                raise PeerClosed("peer closed its end")
            self._buffer += chunk

    def _take(self, limit: int) -> bytes | None:
        """Remove and return a complete frame from the buffer, if there is one."""
        if len(self._buffer) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack_from(self._buffer)
        if size > limit:
            raise FrameTooLarge(f"frame of {size} bytes exceeds {limit}")
        if len(self._buffer) < _HEADER.size + size:
            return None
        payload = bytes(self._buffer[_HEADER.size : _HEADER.size + size])
        del self._buffer[: _HEADER.size + size]
        return payload


def split_frames(data: bytes, limit: int) -> list[bytes]:
    """Split a complete byte string into frames; a truncated tail is dropped."""
    frames: list[bytes] = []
    offset = 0
    while len(data) - offset >= _HEADER.size:
        (size,) = _HEADER.unpack_from(data, offset)
        if size > limit or len(data) - offset - _HEADER.size < size:
            break
        frames.append(data[offset + _HEADER.size : offset + _HEADER.size + size])
        offset += _HEADER.size + size
    return frames
