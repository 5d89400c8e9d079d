"""Every mention of a found value is replaced: in the same text, in other messages, in recorded
answers, in tool-call arguments and in later requests (redact.mentions, redact.pipeline)."""

from __future__ import annotations

import json

from capture.importers.logs import build_trace
from capture.importers.records import LogRecord
from redact import RedactionKey, redact_trace
from redact.mentions import Mentions

KEY = RedactionKey(b"mentions-test-key-0123456789")
PASSWORD = "Qx7mWolf2vanilla"


def test_a_mention_is_a_whole_word_occurrence_of_a_known_value():
    m = Mentions()
    m.learn("URL_PASSWORD", PASSWORD)
    m.learn("PERSON", "Sonia Hunt")
    text = f"typed {PASSWORD} again, x{PASSWORD} and {PASSWORD}9 are not it; Sonia said Huntington"
    found = m.find(text)
    assert [text[a:b] for _, a, b in found] == [PASSWORD, "Sonia"]
    assert [e for e, _, _ in found] == ["URL_PASSWORD", "PERSON"]
    # spans already replaced are not mentions; short values are never learned
    assert m.find(text, taken=[(6, 6 + len(PASSWORD))])[0][1] > 6 + len(PASSWORD)
    m.learn("PASSWORD", "abc")
    assert "abc" not in m
    # every change to the set is counted: a new value, or a value found as a type sorting first
    at = m.learned
    m.learn("EMAIL_ADDRESS", "ops@db.internal")
    assert m.learned == at + 1 and [e for e, _, _ in m.find("mail ops@db.internal")] == ["EMAIL_ADDRESS"]
    m.learn("PASSWORD", PASSWORD)
    assert m.learned == at + 2 and m.find(PASSWORD)[0][0] == "PASSWORD"
    m.learn("URL_PASSWORD", PASSWORD)  # the order it was found in does not matter
    assert m.learned == at + 2 and m.find(PASSWORD)[0][0] == "PASSWORD"


def test_the_longest_value_wins_where_two_start_together():
    m = Mentions()
    m.learn("PERSON", "Sonia Hunt")
    assert [(e, a, b) for e, a, b in m.find("ask Sonia Hunt")] == [("PERSON", 4, 14)]


def test_the_oldest_values_are_forgotten_past_the_limit():
    m = Mentions(limit=2)
    for v in ("alpha-one", "beta-two", "gamma-three"):
        m.learn("SECRET", v)
    assert len(m) == 2 and m.forgotten == 1
    assert "alpha-one" not in m and m.find("alpha-one beta-two") == [("SECRET", 10, 18)]


def test_a_password_found_in_a_url_is_replaced_wherever_it_is_typed_again():
    url = f"postgres://app:{PASSWORD}@db.prod:5432/app"
    first = {
        "model": "m",
        "messages": [
            {"role": "user", "content": f"I typed {PASSWORD} by hand, it fails"},
        ],
    }
    second = {
        "model": "m",
        "messages": [
            {"role": "user", "content": f"I typed {PASSWORD} by hand, it fails"},
            {"role": "assistant", "content": "Which URL?"},
            {"role": "user", "content": f"This one: {url}"},
        ],
    }
    third = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Connect for me"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "connect", "arguments": json.dumps({"text": PASSWORD, "host": "db.prod"})},
                    }
                ],
            },
        ],
    }
    records = [
        LogRecord(arrival_us=1_700_000_000_000_000 + i * 1_000_000, api="chat", model="m", body=b, request_id=f"r{i}", response=r)
        for i, (b, r) in enumerate([(first, "Try again?"), (second, f"Is {PASSWORD} a typo?"), (third, "done")])
    ]
    trace = build_trace(records, source="mentions", source_format="openai-jsonl")
    out, report = redact_trace(trace, KEY, processes=1)
    stored = "\n".join(out.df["body"].to_list() + [r or "" for r in out.df["response"].to_list()])
    # the URL that reveals the value comes in a later request: the first pass learned it
    assert PASSWORD not in stored
    assert report.mentions >= 3
    bodies = [json.loads(b) for b in out.df["body"].to_list()]
    # one value, one surrogate: the bare mention and the URL's password agree
    bare = bodies[1]["messages"][0]["content"].split()[2]
    assert bare != PASSWORD and f":{bare}@" in bodies[1]["messages"][2]["content"]
    args = json.loads(bodies[2]["messages"][1]["tool_calls"][0]["function"]["arguments"])
    assert args["text"] == bare and args["host"] == "db.prod"


def test_a_message_name_is_replaced_whole_and_at_its_mentions():
    # "name" on a chat message names a participant: replaced whatever the analyzer says, the same
    # surrogate in every request, its words replaced where they are typed, earlier requests too;
    # a function message's name is code's and stays
    first = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Please greet Moriarty_Vance-Okafor's team and ping Moriarty today."},
        ],
    }
    second = {
        "model": "m",
        "messages": [
            {"role": "system", "name": "ops_bot", "content": "You route tickets."},
            {"role": "user", "name": "Moriarty_Vance-Okafor", "content": "route it"},
            {"role": "function", "name": "lookup_ticket", "content": "{}"},
        ],
    }
    records = [
        LogRecord(
            arrival_us=1_700_000_000_000_000 + i * 1_000_000, api="chat", model="m", body=b, request_id=f"r{i}", response="ok"
        )
        for i, b in enumerate([first, second, second])
    ]
    trace = build_trace(records, source="names", source_format="openai-jsonl")
    out, _ = redact_trace(trace, KEY, processes=1)
    stored = "\n".join(out.df["body"].to_list())
    for raw in ("Moriarty", "Vance", "Okafor", "ops_bot"):
        assert raw not in stored, raw
    bodies = [json.loads(b) for b in out.df["body"].to_list()]
    names = [[m.get("name") for m in b["messages"]] for b in bodies[1:]]
    assert names[0] == names[1]  # one name, one surrogate
    bot, person, function = names[0]
    assert function == "lookup_ticket"
    assert person.count("_") == 1 and person.count("-") == 1 and person.replace("_", "").replace("-", "").isalpha()
    assert bot != "ops_bot" and bot.count("_") == 1
    assert [m["content"] for m in bodies[1]["messages"]] == [m["content"] for m in second["messages"]]
    # the whole name typed in an earlier request gets the name field's surrogate
    assert person in bodies[0]["messages"][0]["content"]
