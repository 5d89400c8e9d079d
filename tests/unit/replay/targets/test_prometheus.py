"""The Prometheus text parser: labels and escapes, _total twins, histograms, special values, errors."""

from __future__ import annotations

import math

import pytest

from replay.errors import TargetError
from replay.targets.prometheus import parse

TEXT = r"""
# HELP req_total Requests served.
# TYPE req_total counter
req_total{model="a",code="200"} 10
req_total{code="500",model="a"} 2 1700000000000
req_total{code="200",model="b"} 5.5e1

# a free comment, not HELP or TYPE
# TYPE usage gauge
usage{engine="0"} 0.25
usage{engine="1"} 0.75
running 3
odd{path="C:\\dir\\x",msg="say \"hi\"\nnext",empty=""} +Inf
neg -Inf
missing NaN
# TYPE lat histogram
lat_bucket{le="0.1"} 1
lat_bucket{le="0.5"} 3
lat_bucket{le="1.0"} 4
lat_bucket{le="+Inf"} 4
lat_sum 1.6
lat_count 4
# EOF
"""


def test_samples_labels_and_declared_types():
    s = parse(TEXT)
    assert s.types == {"req_total": "counter", "usage": "gauge", "lat": "histogram"}
    assert s.help["req_total"] == "Requests served."
    reqs = s.find("req_total")
    assert [r.value for r in reqs] == [10.0, 2.0, 55.0]
    assert reqs[1].labels == (("code", "500"), ("model", "a"))  # sorted, timestamp ignored
    assert s.find("req_total", code="200") == [reqs[0], reqs[2]]
    assert s.value("running") == 3.0


def test_label_escapes_and_special_values():
    s = parse(TEXT)
    (odd,) = s.find("odd")
    assert odd.label("path") == "C:\\dir\\x"
    assert odd.label("msg") == 'say "hi"\nnext'
    assert odd.label("empty") == ""
    assert odd.value == math.inf
    assert s.value("neg") == -math.inf
    assert math.isnan(s.value("missing"))
    # the key round-trips the escapes
    assert odd.key == r'odd{empty="",msg="say \"hi\"\nnext",path="C:\\dir\\x"}'
    assert parse(odd.key + " 1").samples[0].labels == odd.labels


def test_value_sums_label_sets_and_finds_either_spelling_of_a_counter():
    s = parse(TEXT)
    assert s.value("req_total") == 67.0
    assert s.value("req") == 67.0  # declared without _total
    assert s.value("req", model="a") == 12.0
    assert s.value("usage", agg="mean") == 0.5
    assert s.value("usage", agg="max") == 0.75
    assert s.value("nothing") is None
    with pytest.raises(ValueError):
        s.value("usage", agg="median")


def test_histogram_buckets_sum_count_and_quantiles():
    h = parse(TEXT).histogram("lat")
    assert h is not None
    assert h.buckets == ((0.1, 1.0), (0.5, 3.0), (1.0, 4.0), (math.inf, 4.0))
    assert h.sum == 1.6 and h.count == 4.0
    assert h.quantile(0.5) == pytest.approx(0.3)  # halfway through the (0.1, 0.5] bucket
    assert h.quantile(1.0) == 1.0
    assert parse(TEXT).histogram("nope") is None


def test_histograms_sum_over_label_sets():
    text = "\n".join(
        [
            'x_bucket{le="1",a="1"} 1',
            'x_bucket{le="+Inf",a="1"} 2',
            'x_bucket{le="1",a="2"} 3',
            'x_bucket{le="+Inf",a="2"} 3',
            'x_sum{a="1"} 2',
            'x_sum{a="2"} 1',
            'x_count{a="1"} 2',
            'x_count{a="2"} 3',
        ]
    )
    h = parse(text).histogram("x")
    assert h.buckets == ((1.0, 4.0), (math.inf, 5.0)) and h.sum == 3.0 and h.count == 5.0
    assert parse(text).histogram("x", a="2").count == 3.0


def test_flat_keys_every_sample():
    flat = parse(TEXT).flat()
    assert flat['req_total{code="200",model="a"}'] == 10.0
    assert flat["running"] == 3.0
    assert flat['lat_bucket{le="+Inf"}'] == 4.0


@pytest.mark.parametrize("line", ['req_total{model="a" 1', "name_without_value", "x{a=b} 1", "x 1.2.3"])
def test_malformed_lines_name_the_source_and_line(line):
    with pytest.raises(TargetError, match=r"http://h/metrics: line 2: "):
        parse("ok 1\n" + line, source="http://h/metrics")


def test_empty_text_is_an_empty_scrape():
    s = parse("")
    assert s.samples == [] and s.value("x") is None


def test_a_counter_declared_without_total_keeps_its_written_name():
    # prometheus_client's parser renames these samples to hits_total; parse() names them back
    s = parse('# HELP hits Cache hits.\n# TYPE hits counter\nhits{a="1"} 3\nhits{a="2"} 4\n')
    assert s.types == {"hits": "counter"} and s.help == {"hits": "Cache hits."}
    assert [x.name for x in s.samples] == ["hits", "hits"]
    assert s.flat() == {'hits{a="1"}': 3.0, 'hits{a="2"}': 4.0}
    assert s.value("hits_total") == 7.0


def test_help_text_escapes_are_read():
    assert parse("# HELP x one\\ntwo \\\\ three\nx 1").help["x"] == "one\ntwo \\ three"


@pytest.mark.parametrize("line", ["{, =-a", "# TYPE x", 'x{a="1",,} 1'])
def test_every_parser_failure_is_one_target_error_line(line):
    with pytest.raises(TargetError, match=r"^m\.txt: line 3: cannot parse ") as e:
        parse("# TYPE ok gauge\nok 1\n" + line + "\nlater 2", source="m.txt")
    assert "\n" not in str(e.value) and repr(line) in str(e.value)
