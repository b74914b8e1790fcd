"""Typed errors raised when a wire frame is rejected.

Every error derives from :class:`FrameError` (itself a ``ValueError``) and carries a short,
machine-readable ``reason`` so that the receiver can count rejections per cause, plus an
optional ``field`` naming the part of the frame that was at fault.  The reasons are part of the
wire contract (see ``docs/wire_format.md``).
"""

from __future__ import annotations


class FrameError(ValueError):
    """Base class: a byte string is not an acceptable wire frame."""

    reason = 'frame'

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class BadMagic(FrameError):
    """The frame does not start with the protocol magic (not a fl_uav frame)."""

    reason = 'bad_magic'


class UnsupportedVersion(FrameError):
    """The frame's format version is not one this decoder understands."""

    reason = 'version'


class UnknownKind(FrameError):
    """The frame kind code is not a known :class:`~fl_uav.compression.codec.FrameKind`."""

    reason = 'kind'


class MalformedHeader(FrameError):
    """A fixed-header field other than magic/version/kind/lengths is invalid (reserved flags)."""

    reason = 'header'


class TruncatedFrame(FrameError):
    """The buffer is shorter than the frame its header declares."""

    reason = 'truncated'


class LengthMismatch(FrameError):
    """The buffer is longer than the frame its header declares (trailing bytes)."""

    reason = 'length'


class OversizedFrame(FrameError):
    """The frame, or a size it declares, exceeds a :class:`DecodeLimits` bound."""

    reason = 'oversized'


class CorruptFrame(FrameError):
    """The CRC32 trailer does not match the frame contents."""

    reason = 'crc'


class MalformedTable(FrameError):
    """The tensor table is inconsistent (names, dtype codes, dims, offsets, lengths)."""

    reason = 'table'


class MalformedMetadata(FrameError):
    """The metadata block is not a valid UTF-8 JSON object."""

    reason = 'metadata'


class FingerprintMismatch(FrameError):
    """The frame's model fingerprint differs from the one the receiver expects."""

    reason = 'fingerprint'


class ShapeMismatch(FrameError):
    """The frame's tensor names or shapes differ from the ones the receiver expects."""

    reason = 'shape'


class NonFiniteValues(FrameError):
    """A floating-point tensor contains NaN or infinity."""

    reason = 'nonfinite'


ALL_REASONS: tuple[str, ...] = tuple(
    cls.reason
    for cls in (
        BadMagic,
        UnsupportedVersion,
        UnknownKind,
        MalformedHeader,
        TruncatedFrame,
        LengthMismatch,
        OversizedFrame,
        CorruptFrame,
        MalformedTable,
        MalformedMetadata,
        FingerprintMismatch,
        ShapeMismatch,
        NonFiniteValues,
    )
)
"""Every ``reason`` a v1 decoder can report (for pre-registering rejection counters)."""
