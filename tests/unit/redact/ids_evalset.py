"""An evaluation set of national ids, secrets in code and config pastes, and spelled-out contacts,
made apart from the samples :mod:`redact.national_ids`, :mod:`redact.spelled` and the secret
recognizers were developed against, and its scoring.

Owns :data:`SEED`, :func:`build_ids_set`, :func:`score`, :func:`token_counts` and :func:`main`. ``python -m
tests.unit.redact.ids_evalset [--seed N] [--sessions N]`` prints recall per type (the share of
distinct planted values that no stored byte of the redacted trace holds, in any case, as written
or JSON-escaped).

How it is made apart: the development samples are the hand-typed values of
``tests/unit/redact/test_new_classes.py``. Here every value is drawn by a seeded generator
(:data:`SEED`, never used in development): national ids with valid checksums computed here (and
one in five with a broken checksum, which must go too), provider keys of random characters at
each provider's length, names from Faker's locales for spelled emails, phone digits read out as
words. The contexts are phrasings written for this set (not the recognizers' word lists), in
five layouts: a chat sentence, a tool call's JSON arguments (the id under a key such as
``"document_number"``), a ``.env`` / YAML / Python config paste, a ``curl`` command, and a CSV
row with an id column.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import tempfile
import time
from collections import Counter

from pathlib import Path
from typing import Any

from redact.national_ids import NATIONAL_ID_ENTITIES

__all__ = ["SEED", "build_ids_set", "score", "token_counts", "main"]

SEED = 418_277

_DNI = "TRWAGMYFPDXBNJZSQVHLCKE"


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _verhoeff_digit(body: str) -> str:
    d = [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 0, 6, 7, 8, 9, 5], [2, 3, 4, 0, 1, 7, 8, 9, 5, 6],
         [3, 4, 0, 1, 2, 8, 9, 5, 6, 7], [4, 0, 1, 2, 3, 9, 5, 6, 7, 8], [5, 9, 8, 7, 6, 0, 4, 3, 2, 1],
         [6, 5, 9, 8, 7, 1, 0, 4, 3, 2], [7, 6, 5, 9, 8, 2, 1, 0, 4, 3], [8, 7, 6, 5, 9, 3, 2, 1, 0, 4],
         [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]]  # fmt: skip
    p = [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 5, 7, 6, 2, 8, 3, 0, 9, 4], [5, 8, 0, 3, 7, 9, 6, 1, 4, 2],
         [8, 9, 1, 6, 0, 4, 3, 5, 2, 7], [9, 4, 5, 3, 1, 2, 6, 8, 7, 0], [4, 2, 8, 6, 5, 7, 3, 9, 0, 1],
         [2, 7, 9, 3, 8, 0, 6, 4, 1, 5], [7, 0, 4, 6, 9, 1, 3, 2, 5, 8]]  # fmt: skip
    inv = [0, 4, 3, 2, 1, 5, 6, 7, 8, 9]
    c = 0
    for i, ch in enumerate(reversed(body)):
        c = d[c][p[(i + 1) % 8][int(ch)]]
    return str(inv[c])


def _mod11(body: str, weights: list[int]) -> str:
    r = sum(int(a) * w for a, w in zip(body, weights, strict=False)) % 11
    return "0" if r < 2 else str(11 - r)


def _broken(value: str, rng: random.Random) -> str:
    """The value with its last digit changed (a failed checksum)."""
    i = max(i for i, c in enumerate(value) if c.isdigit())
    return value[:i] + str((int(value[i]) + rng.randint(1, 9)) % 10) + value[i + 1 :]


def _id(kind: str, rng: random.Random) -> str:
    up = string.ascii_uppercase
    if kind == "UK_NINO":
        v = rng.choice("ABCEGHJKLMNPRSTWXYZ") + rng.choice("ABCEGHJKLMNPRSTWXYZ") + _digits(rng, 6) + rng.choice("ABCD")
        return v if rng.random() < 0.5 else f"{v[:2]} {v[2:4]} {v[4:6]} {v[6:8]} {v[8]}"
    if kind == "IN_AADHAAR":
        body = rng.choice("23456789") + _digits(rng, 10)
        v = body + _verhoeff_digit(body)
        return rng.choice([v, f"{v[:4]} {v[4:8]} {v[8:]}", f"{v[:4]}-{v[4:8]}-{v[8:]}"])
    if kind == "IN_PAN":
        return (
            "".join(rng.choice(up) for _ in range(3))
            + rng.choice("PCHFATBLJG")
            + rng.choice(up)
            + _digits(rng, 4)
            + rng.choice(up)
        )
    if kind == "DE_TAX_ID":
        v = rng.choice("123456789") + _digits(rng, 10)
        return v if rng.random() < 0.5 else f"{v[:2]} {v[2:5]} {v[5:8]} {v[8:]}"
    if kind == "DE_ID_CARD":
        return "".join(rng.choice("CFGHJKLMNPRTVWXYZ0123456789") for _ in range(8)) + rng.choice(string.digits)
    if kind == "CA_SIN":
        v = rng.choice("1234567") + _digits(rng, 8)
        return rng.choice([v, f"{v[:3]} {v[3:6]} {v[6:]}", f"{v[:3]}-{v[3:6]}-{v[6:]}"])
    if kind == "ES_DNI":
        if rng.random() < 0.5:
            n = _digits(rng, 8)
            return n + _DNI[int(n) % 23]
        x = rng.choice("XYZ")
        n = _digits(rng, 7)
        return x + n + _DNI[int(str("XYZ".index(x)) + n) % 23]
    if kind == "FR_NIR":
        body = rng.choice("12") + _digits(rng, 2) + f"{rng.randint(1, 12):02d}" + f"{rng.randint(1, 95):02d}" + _digits(rng, 6)
        key = f"{97 - int(body) % 97:02d}"
        v = body + key
        return v if rng.random() < 0.5 else f"{v[0]} {v[1:3]} {v[3:5]} {v[5:7]} {v[7:10]} {v[10:13]} {v[13:]}"
    if kind == "BR_CPF":
        b = _digits(rng, 9)
        b += _mod11(b, list(range(10, 1, -1)))
        b += _mod11(b, list(range(11, 1, -1)))
        return b if rng.random() < 0.4 else f"{b[:3]}.{b[3:6]}.{b[6:9]}-{b[9:]}"
    if kind == "BR_CNPJ":
        b = _digits(rng, 8) + "0001"
        b += _mod11(b, [5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2])
        b += _mod11(b, [6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2])
        return b if rng.random() < 0.4 else f"{b[:2]}.{b[2:5]}.{b[5:8]}/{b[8:12]}-{b[12:]}"
    if kind == "PASSPORT":
        return (
            rng.choice(up) + _digits(rng, 8)
            if rng.random() < 0.6
            else "".join(rng.choice(up + string.digits) for _ in range(8)) + "7"
        )
    raise ValueError(kind)


ID_KINDS = NATIONAL_ID_ENTITIES
# phrasings written for this set: how a person or a system introduces each id
CONTEXTS = {
    "UK_NINO": ("National Insurance no.", "my NINO", "NI number"),
    "IN_AADHAAR": ("Aadhaar number", "UIDAI Aadhaar", "aadhaar"),
    "IN_PAN": ("PAN card", "permanent account number (PAN)", "PAN no"),
    "DE_TAX_ID": ("steuerliche Identifikationsnummer", "Steuer-IdNr.", "tax ID (DE)"),
    "DE_ID_CARD": ("Ausweisnummer", "Personalausweis Nr.", "German ID card no"),
    "CA_SIN": ("Social Insurance Number", "SIN #", "NAS (numéro d'assurance sociale)"),
    "ES_DNI": ("DNI/NIE", "documento", "NIF"),
    "FR_NIR": ("n° de sécurité sociale", "numéro INSEE", "NIR"),
    "BR_CPF": ("CPF do titular", "CPF nº", "cpf"),
    "BR_CNPJ": ("CNPJ da empresa", "CNPJ:", "cnpj"),
    "PASSPORT": ("passport no.", "Passport Number", "numéro de passeport"),
}
ID_KEYS = ("document_number", "id_value", "national_id", "taxpayer_id", "doc", "identifier")


def _secret(kind: str, rng: random.Random) -> tuple[str, str]:
    """(the secret, a config line that holds it)."""
    an = string.ascii_letters + string.digits
    r = lambda n, cs=an: "".join(rng.choice(cs) for _ in range(n))  # noqa: E731
    if kind == "AWS_KEY_ID":
        v = rng.choice(["AKIA", "ASIA"]) + r(16, string.ascii_uppercase + string.digits)
        return v, rng.choice([f"aws_access_key_id = {v}", f"AWS_ACCESS_KEY_ID={v}", f'"AccessKeyId": "{v}"'])
    if kind == "AWS_SECRET":
        v = r(40, an + "/+")
        return v, rng.choice([f"aws_secret_access_key = {v}", f"AWS_SECRET_ACCESS_KEY={v}", f'"SecretAccessKey": "{v}"'])
    if kind == "GCP_KEY":
        v = "AIza" + r(35, an + "_-")
        return v, rng.choice([f"maps_key: {v}", f"const key = '{v}';", f"?key={v}"])
    if kind == "AZURE_KEY":
        v = r(86) + "=="
        return (
            v,
            f"DefaultEndpointsProtocol=https;AccountName={r(8, string.ascii_lowercase)};AccountKey={v};"
            "EndpointSuffix=core.windows.net",
        )
    if kind == "GITHUB":
        v = rng.choice(["ghp_", "gho_"]) + r(36) if rng.random() < 0.6 else "github_pat_" + r(22) + "_" + r(59)
        return v, rng.choice([f"GH_TOKEN={v}", f"git clone https://{v}@github.com/acme/app.git", f"token: {v}"])
    if kind == "SLACK":
        v = f"xox{rng.choice('abpr')}-{_digits(rng, 12)}-{_digits(rng, 13)}-{r(24)}"
        return v, rng.choice([f"SLACK_BOT_TOKEN={v}", f"slack_token = '{v}'"])
    if kind == "STRIPE":
        v = rng.choice(["sk_live_", "rk_live_"]) + r(rng.randint(24, 99))
        return v, rng.choice([f"stripe.api_key = '{v}'", f"STRIPE_SECRET={v}"])
    if kind == "OPENAI":
        v = "sk-proj-" + r(rng.randint(48, 120), an + "_-") if rng.random() < 0.5 else "sk-" + r(48)
        return v, rng.choice([f"client = OpenAI(api_key='{v}')", f"OPENAI_API_KEY={v}"])
    if kind == "ANTHROPIC":
        v = "sk-ant-api03-" + r(95, an + "_-") + "AA"
        return v, rng.choice([f'anthropic.Anthropic(api_key="{v}")', f"export ANTHROPIC_API_KEY={v}"])
    if kind == "GOOGLE_OAUTH":
        v = "ya29." + r(rng.randint(60, 150), an + "_-")
        return v, rng.choice([f"access_token: {v}", f"creds.token = '{v}'"])
    if kind == "JWT":
        import base64

        head = (
            base64.urlsafe_b64encode(json.dumps({"alg": rng.choice(["RS256", "HS256"]), "typ": "JWT"}).encode())
            .decode()
            .rstrip("=")
        )
        body = base64.urlsafe_b64encode(json.dumps({"sub": _digits(rng, 6), "exp": 1_900_000_000}).encode()).decode().rstrip("=")
        v = f"{head}.{body}.{r(43, an + '_-')}"
        return v, rng.choice([f"id_token={v}", f"Cookie: session={v}"])
    if kind == "PEM":
        lines = [r(64, an + "+/") for _ in range(rng.randint(3, 6))]
        kind_word = rng.choice(["", "RSA ", "EC ", "OPENSSH "])
        v = f"-----BEGIN {kind_word}PRIVATE KEY-----\n" + "\n".join(lines) + f"\n-----END {kind_word}PRIVATE KEY-----"
        return v, v
    if kind == "ENV_PASSWORD":
        v = r(rng.randint(10, 20), an + "!#%^*")
        name = rng.choice(["POSTGRES_PASSWORD", "REDIS_PASS", "SMTP_PASSWORD", "ADMIN_PWD", "MYSQL_ROOT_PASSWORD", "APP_SECRET"])
        return v, f"{name}={v}"
    if kind == "BEARER":
        v = r(rng.randint(32, 64), an + "._-")
        return v, rng.choice(
            [
                f'curl -H "Authorization: Bearer {v}" https://api.acme.test/v2/items',
                f"headers = {{'Authorization': 'Bearer {v}'}}",
            ]
        )
    if kind == "URL_PASSWORD":
        v = r(rng.randint(8, 16))
        return (
            v,
            f"{rng.choice(['postgresql', 'mongodb+srv', 'redis', 'amqp'])}://svc_{r(4, string.ascii_lowercase)}:{v}"
            f"@db-{r(3, string.ascii_lowercase)}.internal:5432/main",
        )
    raise ValueError(kind)


SECRET_KINDS = ("AWS_KEY_ID", "AWS_SECRET", "GCP_KEY", "AZURE_KEY", "GITHUB", "SLACK", "STRIPE", "OPENAI", "ANTHROPIC",
                "GOOGLE_OAUTH", "JWT", "PEM", "ENV_PASSWORD", "BEARER", "URL_PASSWORD")  # fmt: skip
_DIGIT_WORD = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _spelled(kind: str, rng: random.Random, faker: Any) -> tuple[str, str]:
    first, last = faker.first_name().lower(), faker.last_name().lower()
    first = "".join(c for c in first if c.isascii() and c.isalpha()) or "kim"
    last = "".join(c for c in last if c.isascii() and c.isalpha()) or "lee"
    dom = rng.choice(["northwind", "fabrikam", "contoso", "tailspin"]) + str(rng.randint(2, 99))
    tld = rng.choice(["com", "net", "org", "io", "de"])
    if kind == "SPELLED_EMAIL":
        v = rng.choice([
            f"{first} dot {last} at {dom} dot {tld}",
            f"{first}.{last} [at] {dom} [dot] {tld}",
            f"{first}{last[0]} (at) {dom} (dot) {tld}",
            f"{first} AT {dom} DOT {tld}",
        ])  # fmt: skip
        return v, rng.choice(
            ["you can email me at {}", "my address is {} (spelled out for the bot)", "reach {} for the invoice"]
        ).format(v)
    digits = rng.choice(["555", "020", "0161", "917"]) + _digits(rng, 7)
    if rng.random() < 0.6:
        v = " ".join(_DIGIT_WORD[int(d)] for d in digits)
    else:
        v = " ".join(digits)
    return v, rng.choice(["call me at {}", "my mobile: {}", "text {} after 6", "phone number is {}"]).format(v)


def build_ids_set(seed: int = SEED, sessions: int = 40) -> tuple[Any, dict[str, str]]:
    """A trace of ``sessions`` chat requests planting each class, and the planted values (value ->
    type)."""
    from faker import Faker

    from capture.importers.logs import build_trace
    from capture.importers.records import LogRecord

    rng = random.Random(seed)
    faker = Faker("en_GB")
    faker.seed_instance(seed)
    planted: dict[str, str] = {}
    records = []
    for i in range(sessions):
        lines, args, csv = [], {}, ["row,kind,value,status"]
        for kind in ID_KINDS:
            v = _id(kind, rng)
            if rng.random() < 0.2 and any(c.isdigit() for c in v):
                v = _broken(v, rng)  # a failed checksum must not let it through
            planted[v] = kind
            ctx = rng.choice(CONTEXTS[kind])
            layout = rng.choice(["prose", "args", "csv"])
            if layout == "prose":
                lines.append(
                    rng.choice(["Here is my {} {}.", "{}: {}", "the client's {} is {} — please verify", "({} {})"]).format(ctx, v)
                )
            elif layout == "args":
                args[rng.choice(ID_KEYS) + f"_{kind.lower()}"] = f"{ctx} {v}"
            else:
                csv.append(f"{len(csv)},{ctx},{v},{rng.choice(['ok', 'pending'])}")
        paste = []
        for kind in SECRET_KINDS:
            v, line = _secret(kind, rng)
            planted[v] = kind
            paste.append(line)
        rng.shuffle(paste)
        for kind in ("SPELLED_EMAIL", "SPELLED_PHONE"):
            v, sentence = _spelled(kind, rng, faker)
            planted[v] = kind
            lines.append(sentence)
        fence = rng.choice(["```env\n", "```yaml\n", "```python\n", "```\n"])
        messages = [
            {"role": "system", "content": "You are a support agent with tools."},
            {"role": "user", "content": "\n".join(lines) + "\n\n" + "\n".join(csv)},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"t{i}", "type": "function", "function": {"name": "verify_identity", "arguments": json.dumps(args)}}
                ],
            },
            {"role": "tool", "tool_call_id": f"t{i}", "content": json.dumps({"status": "mismatch", "checked": len(args)})},
            {"role": "user", "content": "It fails with this config:\n" + fence + "\n".join(paste) + "\n```"},
        ]
        records.append(
            LogRecord(
                arrival_us=1_760_000_000_000_000 + i * 500_000,
                api="chat",
                model="gpt-4o",
                body={"model": "gpt-4o", "messages": messages},
                request_id=f"ids{i}",
            )
        )
    return build_trace(records, source="ids-evalset", source_format="openai-jsonl"), planted


def _stored(path: Path) -> bytes:
    import pyarrow.parquet as pq

    plain = path.with_suffix(".plain")
    pq.write_table(pq.read_table(path), plain, compression="none", use_dictionary=False)
    return plain.read_bytes().lower()


def _forms(value: str) -> set[bytes]:
    once = {value, json.dumps(value)[1:-1]}
    return {f.lower().encode() for f in once | {json.dumps(f)[1:-1] for f in once}}


def score(trace: Any, planted: dict[str, str], processes: int = 1) -> tuple[dict[str, tuple[int, int]], int]:
    """Per type (left, planted) and the requests quarantined, after :func:`redact.redact_file`.
    Every planted value is first found in the raw trace's bytes, read the same way (else the grep
    would prove nothing): a ValueError names one that is not."""
    from redact import RedactionKey, redact_file

    with tempfile.TemporaryDirectory() as d:
        src = trace.write(Path(d) / "raw.parquet")
        dst = Path(d) / "red.parquet"
        report = redact_file(src, dst, RedactionKey(b"ids-evalset-key-0123456789"), processes=processes)
        data = _stored(dst)
        raw = _stored(src)
    unseen = [v for v in planted if not any(f in raw for f in _forms(v))]
    if unseen:
        raise ValueError(f"{len(unseen)} planted values not in the raw trace's bytes, e.g. {unseen[0]!r}")
    per: dict[str, list[int]] = {}
    for v, kind in planted.items():
        left = any(f in data for f in _forms(v))
        row = per.setdefault(kind, [0, 0])
        row[0] += int(left)
        row[1] += 1
    return {k: (a, b) for k, (a, b) in per.items()}, report.quarantined


def token_counts(planted: dict[str, str], tokenizer: str) -> tuple[int, Counter]:
    """How many national ids and spelled contacts of ``planted`` there are, and per type how many
    surrogates (:meth:`redact.surrogates.Surrogates.make`) change the token count."""
    from redact.key import RedactionKey
    from redact.surrogates import Surrogates
    from replay.tokenizer import load_tokenizer

    sur = Surrogates(RedactionKey(b"ids-evalset-key-0123456789"), load_tokenizer(tokenizer))
    entity = {"SPELLED_EMAIL": "EMAIL_ADDRESS", "SPELLED_PHONE": "PHONE_NUMBER"}
    n, off = 0, Counter()
    for v, kind in planted.items():
        if kind in entity or kind in ID_KINDS:
            n += 1
            off[kind] += sur.make(entity.get(kind, kind), v)[1]
    return n, +off


def main() -> None:
    ap = argparse.ArgumentParser(description="Recall per type on the national-id / secret / spelled-contact evaluation set.")
    ap.add_argument("--seed", type=int, default=SEED, help="the generator's seed (default: %(default)s)")
    ap.add_argument("--sessions", type=int, default=40, help="requests to generate (default: %(default)s)")
    ap.add_argument("--tokens", action="store_true", help="also count the surrogates that change a token count (GPT-2, Qwen2)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    trace, planted = build_ids_set(a.seed, a.sessions)
    per, quarantined = score(trace, planted)
    print(f"{'type':<14} {'planted':>7} {'left':>5} {'recall':>7}")
    for kind in (*ID_KINDS, *SECRET_KINDS, "SPELLED_EMAIL", "SPELLED_PHONE"):
        left, n = per.get(kind, (0, 0))
        print(f"{kind:<14} {n:>7} {left:>5} {100 * (n - left) / max(n, 1):>6.1f}%")
    total_left = sum(a for a, _ in per.values())
    print(
        f"all: {sum(b for _, b in per.values())} planted, {total_left} left; "
        f"quarantined requests: {quarantined}; {time.perf_counter() - t0:.0f} s"
    )
    if a.tokens:
        for tok in ("gpt2", "qwen2"):
            n, off = token_counts(planted, tok)
            print(f"{tok}: {n - sum(off.values())} of {n} id / spelled surrogates keep the token count; off: {dict(off)}")


if __name__ == "__main__":
    main()
