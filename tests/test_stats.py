"""The report's speeds: a number only where something measurable was timed."""

from __future__ import annotations

from specgguf.core.stats import RunStats, format_rate, measured_rate


def test_one_token_prompt_has_no_speed():
    """A 1-token prompt evaluates nothing before the first round (its token is evaluated with
    the first generated one): the timer measured microseconds of bookkeeping, and the report
    once said "speed: 179275 t/s"."""
    s = RunStats(n_max=3, prompt_n=1, prompt_ms=0.0056, predicted_n=1, predicted_ms=40.0)
    encoded, decoded = s.report_lines()[:2]
    assert encoded.endswith("speed:      n/a") and "t/s" not in encoded
    assert decoded.endswith("speed:      n/a")  # one token's time is a latency
    t = s.timings()
    assert t["prompt_per_second"] is None and t["predicted_per_second"] is None
    assert t["prompt_ms"] == 0.006 and t["predicted_ms"] == 40.0  # the times stay


def test_measurable_speeds_are_printed_as_llama_cpp_does():
    s = RunStats(n_max=3, prompt_n=120, prompt_ms=60.0, predicted_n=64, predicted_ms=800.0)
    encoded, decoded = s.report_lines()[:2]
    assert encoded == "encoded  120 tokens in    0.060 seconds, speed: 2000.000 t/s"
    assert decoded == "decoded   64 tokens in    0.800 seconds, speed:   80.000 t/s"
    assert s.timings()["prompt_per_second"] == 2000.0
    assert s.timings()["predicted_per_second"] == 80.0


def test_thresholds():
    assert measured_rate(2, 1.0) == 2000.0
    assert measured_rate(1, 1000.0) is None
    assert measured_rate(1000, 0.999) is None
    assert measured_rate(0, 0.0) is None
    assert format_rate(None) == "     n/a" and format_rate(12.5) == "  12.500 t/s"
