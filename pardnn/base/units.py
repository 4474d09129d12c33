"""Parsing of the sizes, rates and times users type on the command line.

Sizes: `32GiB`, `16GB`, `512MiB`, `1.5TB`, `2PiB`, `1EB`, plain bytes (`1048576`).
Rates: `300GB/s`, `12.5GiB/s`, `1e9` (bytes per second), returned in bytes per us;
`200Gb/s` or `200Gbit/s` (an upper-case prefix and a lower-case b, as links are quoted;
`Gib/s`, binary) are bits per second. A size written that way (`16Gb`) is refused: memory is in bytes.
Times: `25us`, `1ms`, `0.5s`, `100ns`, plain numbers are microseconds.
Every parser raises UserError naming the flag and the text it could not read, or
the value when it lies outside the range below (an absurd value is bad input, not
an overflow deep inside a placer).
"""

import re

from pardnn.base.errors import UserError

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15, "eb": 10**18,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50, "e": 2**60,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50, "eib": 2**60,
}
# Largest accepted size (bytes) and rate (bytes/s): 1 EiB, far above any device yet
# well inside int64 byte counts. Rates of at least 1 B/s; times of at most one day.
MAX_SIZE = 2**60
MIN_RATE_BPS = 1.0
MAX_TIME_US = 86400e6
_TIME_UNITS = {"": 1.0, "us": 1.0, "µs": 1.0, "ns": 1e-3, "ms": 1e3, "s": 1e6}
_NUMBER = r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*"


# Gb, Gib, Gbit, Gibit, kbit: bits, decimal or binary (see the module docstring)
_BITS = re.compile(r"(?:([KMGTPE])(i?)b|([kKMGTPE])(i?)bit)")


def _split(text, flag, what):
    match = re.fullmatch(_NUMBER + r"([A-Za-zµ/]*)\s*", str(text))
    if not match:
        raise UserError(f"{flag}: cannot read {what} {text!r}")
    return float(match.group(1)), match.group(2).lower()


def _bits(text):
    """The size unit in bytes (`gb`, `gib`) of a unit in bits such as `Gb/s`, `Gib/s` or
    `Gbit`, else None."""
    match = re.fullmatch(_NUMBER + r"(\w+?)(/s)?\s*", str(text))
    bits = match and _BITS.fullmatch(match.group(2))
    if not bits:
        return None
    prefix, binary = (bits.group(1), bits.group(2)) if bits.group(1) else (bits.group(3), bits.group(4))
    return prefix.lower() + binary + "b"


def parse_size(text, flag="--memory") -> int:
    """Bytes in a size such as `32GiB`, `16GB` or `1073741824`."""
    value, unit = _split(text, flag, "size")
    bits = _bits(text)
    if bits:
        prefix = bits[0].upper()
        raise UserError(f"{flag}: {text!r} reads as bits; give bytes, e.g. {value:g}{prefix}B or "
                        f"{value:g}{prefix}iB")
    if unit not in _SIZE_UNITS:
        raise UserError(f"{flag}: unknown size unit in {text!r} "
                        f"(use B, KB, MB, GB, TB, PB, EB, KiB, MiB, GiB, TiB, PiB, EiB)")
    nbytes = value * _SIZE_UNITS[unit]
    if not nbytes <= MAX_SIZE:
        raise UserError(f"{flag}: size {text!r} is too large (at most 1 EiB)")
    return int(round(nbytes))


def parse_rate(text, flag="--bandwidth") -> float:
    """Bytes per microsecond in a rate such as `300GB/s` (plain numbers are bytes/s)."""
    value, unit = _split(text, flag, "rate")
    size_unit = unit[:-2] if unit.endswith("/s") else unit
    bits = _bits(text)
    if bits:
        value, size_unit = value / 8, bits
    if size_unit not in _SIZE_UNITS:
        raise UserError(f"{flag}: unknown rate unit in {text!r} (use e.g. 300GB/s, 12GiB/s or 200Gb/s)")
    per_second = value * _SIZE_UNITS[size_unit]
    if not MIN_RATE_BPS <= per_second <= MAX_SIZE:
        raise UserError(f"{flag}: rate {text!r} is out of range (1 B/s to 1 EiB/s)")
    return per_second / 1e6


def parse_time(text, flag="--latency") -> float:
    """Microseconds in a time such as `25us`, `1ms` or `0.5s` (plain numbers are us)."""
    value, unit = _split(text, flag, "time")
    if unit not in _TIME_UNITS:
        raise UserError(f"{flag}: unknown time unit in {text!r} (use ns, us, ms or s)")
    us = value * _TIME_UNITS[unit]
    if not us <= MAX_TIME_US:
        raise UserError(f"{flag}: time {text!r} is too long (at most one day)")
    return us


def format_size(nbytes) -> str:
    """Human-readable binary size, e.g. `1.50 GiB`."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(value) < 1024 or unit == "EiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_time(us) -> str:
    """Human-readable duration from microseconds."""
    us = float(us)
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.1f} us"
