"""Structure inside a text: JSON held in a string, and tables pasted into one.

Owns :class:`View`, :func:`view`, :func:`field_entity`, :func:`table_hints`, :func:`is_json`,
:func:`json_unescape`, :func:`json_escape`, :func:`escaped_like`, :func:`value_ranges` and
:func:`span_values`. The analyzer
(:class:`redact.analyzer.TextAnalyzer`) reads every text through its :func:`view`; the
:class:`redact.pipeline.Redactor` writes surrogates into a JSON text escaped as JSON.

- **JSON in a string.** A text whose first character (after white space) is ``{`` or ``[`` and
  that parses as a JSON object or array (tool-call arguments, a ``tool`` message or
  ``function_call_output``, pasted JSON) is read leaf by leaf. The analyzer reads a rendering of
  it, one line a leaf: ``key: value`` with the value's JSON escapes decoded (``\\u00e9`` is
  ``é``), so that the NER reads what the string says and a key stands beside its value as
  context. Spans found in the rendering are mapped back onto the raw JSON text and clipped to the
  string (and number) leaves: keys, numbers outside a span, booleans, nulls and the layout
  (compact or spaced separators, indentation, key order) are never touched, and a surrogate
  placed in a string is escaped as JSON (:func:`json_escape`; ``\\u`` escapes where the value
  had them), so the text stays JSON with the same keys. A string leaf that is itself JSON is
  read the same way (up to :data:`MAX_DEPTH` levels).
- **Keys as context** (:func:`field_entity`). A leaf whose key says what it holds is that type
  whole, whatever its case and whether the NER finds it: ``email`` / ``contact_email`` /
  ``emailAddress`` an EMAIL_ADDRESS; ``phone`` / ``mobile`` / ``tel`` / ``fax`` a
  PHONE_NUMBER; ``name`` qualified as a person's (``customer_name``, ``firstName``,
  ``full_name``, ``holder``...) a PERSON; ``address`` / ``street`` a STREET_ADDRESS; ``ssn`` a
  US_SSN; ``iban`` an IBAN_CODE; ``card_number`` a CREDIT_CARD. Each also asks the value to look
  the part (:func:`_value_ok`: a person's name is one to five alphabetic words, a phone has five
  or more digits, an email no more than eight words); placeholders (``n/a``, ``null``,
  ``unknown``) are left. Keys that name a thing (``company_name``, ``file_name``,
  ``product_name``, ``email_subject``, ``ip_address``) say nothing. A bare ``name`` (or a role:
  ``customer``, ``owner``, ``contact``) is a person's when its value is two to five words, or one
  word in an object with an email or phone field.
- **Tables** (:func:`table_hints`): runs of two or more lines with the same number (2+) of
  cells split by ``|`` (Markdown, its ``---`` row skipped; psql output, its ``---+---`` rule
  skipped), tabs (TSV), semicolons or commas (CSV, quoted cells read as CSV reads them). The
  first row is a header when each of its cells is a short label (``Full name``, ``Phone No.``;
  not an email, a number or code). A column is a type by its header (:func:`field_entity`),
  or, without one, by its cells: most (60%) of its non-empty cells shaped like emails, or like
  phone numbers (digits in groups, or ``+`` and digits; not a bare run, a date or an IPv4
  address); a column of two- or three-word alphabetic cells is one of names when the table has
  an email or phone column (and its header, if any, names no thing: ``Product``, ``City``).
  Such a column is redacted cell by cell, each cell whole, in whatever case it is written
  (``joshua anderson``, ``HARRIET DAVIES``); the surrogates keep the case of each word
  (:mod:`redact.surrogates`). Every other cell, and the text around the table, go through the
  analyzer as any text does.
- **Cost.** A text is parsed as JSON only when its first character is ``{`` or ``[``; lines are
  split for tables only when the text holds a line break and a comma, semicolon, tab or ``|``, and a
  column is classified only in a run of lines with equal cell counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

__all__ = [
    "MAX_DEPTH",
    "View",
    "view",
    "field_entity",
    "table_hints",
    "is_json",
    "json_unescape",
    "json_escape",
    "escaped_like",
    "span_values",
    "value_ranges",
]

# JSON strings inside JSON strings read this many levels deep
MAX_DEPTH = 3
# a table column is a type when this share of its non-empty cells is shaped like it
COLUMN_SHARE = 0.6

Span = tuple[str, int, int]

# -- what a key or a header says ------------------------------------------------------------------

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")
# words that make a field a thing's, not a person's or their contact's
_THING = frozenset(
    """
    company business org organization organisation brand product item sku file filename path dir folder tool
    function func method class module package model service server host hostname domain app application bucket
    table column field db database schema index queue topic channel group team project repo repository branch
    tag label category type kind plan store shop merchant vendor bank school university college hotel restaurant
    venue airline course job event campaign template key var variable env param parameter attr attribute
    property prop resource region zone city country state province county street building room device node
    cluster pod container image namespace role permission policy rule feature flag metric dimension stage step
    task workflow pipeline bot agent assistant skill plugin extension font color colour icon theme locale
    language lang currency unit format version release document doc sheet tab page section title heading
    subject body text content message description summary note notes comment html url uri link site website
    web ip mac wallet contract memory base bind listen remote local proxy gateway endpoint socket port
    """.split()
)
_EMAIL_NOT = frozenset(
    """
    body subject template text content message html draft thread signature header headers verified
    verification enabled disabled status count opt optin optout sent domain provider type format valid
    validated confirmed confirmation bounce bounced id ids preference preferences settings notifications
    notification frequency campaign list server host port client date time at on flag is has can should
    allowed public visible hash hashed sha md5 pattern regex length mask masked
    """.split()
)
_PHONE_NOT = frozenset(
    """
    type verified verification enabled model brand os status count id country code prefix region carrier
    allowed public visible valid validated confirmed hash hashed mask masked format pattern regex length
    """.split()
)
# words that qualify "name" as a person's (customer_name, firstName, "Full Name")
_PERSON_QUALIFIERS = frozenset(
    """
    full first last given family middle maiden sur fore legal preferred real nick display contact customer
    client patient person employee user member owner account holder card cardholder recipient sender author
    assignee reporter requester applicant candidate student teacher doctor physician guest passenger traveler
    traveller driver buyer seller rep manager parent guardian spouse partner emergency billing shipping
    beneficiary payee payer signer signatory approver reviewer submitter creator caller callee lead prospect
    subscriber attendee participant speaker your my his her primary secondary name names mother father child
    kin next of the
    """.split()
)
# whole keys that are a person's name field on their own
_PERSON_KEYS = frozenset(
    """
    fullname firstname lastname surname surnames forename forenames givenname familyname middlename maidenname
    nickname displayname contactname customername clientname patientname username realname legalname
    holdername accountholder cardholder cardholdername payee beneficiary beneficiaryname recipientname
    sendername authorname ownername employeename membername guestname passengername fname lname mname
    """.split()
)
# keys of a person's name when the value is a name-shaped two to four words (else an id, a handle)
_PERSON_ROLES = frozenset(
    """
    customer client contact patient employee person assignee owner recipient sender author passenger guest
    holder signatory spouse manager reporter requester applicant candidate attendee participant driver
    beneficiary subscriber lead prospect member user approver reviewer buyer seller tenant landlord
    """.split()
)
_ADDRESS_NOT = frozenset({"ip", "mac", "email", "mail", "web", "wallet", "url", "memory", "base", "bind", "listen"} | {
    "server", "remote", "local", "host", "contract", "btc", "eth", "bitcoin", "ethereum", "proxy", "gateway",
    "mail", "ipv4", "ipv6", "hardware", "physical", "network", "net", "socket", "return", "reply", "bluetooth",
    "id", "type", "verified", "count", "format", "valid",
})  # fmt: skip
_PLACEHOLDERS = frozenset(
    {
        "",
        "n/a",
        "na",
        "none",
        "null",
        "nil",
        "unknown",
        "-",
        "--",
        "—",
        "tbd",
        "redacted",
        "[redacted]",
        "***",
        "undefined",
        "anonymous",
        "?",
        "x",
    }
)

# what a key says; "PERSON?" is a bare "name" or a role word (its value must look like a full name)
_WEAK_PERSON = "PERSON?"


def _words(key: str) -> list[str]:
    return [w for w in _NON_WORD.split(_CAMEL.sub(" ", key.strip()).lower()) if w]


def field_entity(key: str) -> str | None:
    """The entity type a JSON key or a table header says its values are (see the module
    docstring), ``"PERSON?"`` for a bare ``name`` or a role (``customer``, ``owner``: a person's
    name only when the value looks like a full name), or None."""
    words = _words(key)
    if not words or len(words) > 6:
        return None
    joined = "".join(words)
    wset = set(words)
    if (
        "email" in wset
        or "emails" in wset
        or "mail" in wset
        or joined in ("emailaddress", "emailaddr")
        or ("e" in wset and "mail" in joined)
    ):
        return None if wset & _EMAIL_NOT else "EMAIL_ADDRESS"
    if any(w.startswith("email") and len(w) <= 12 for w in words):  # emailaddress, emailid...
        return None if wset & _EMAIL_NOT or joined.endswith("id") else "EMAIL_ADDRESS"
    if wset & {"phone", "phones", "telephone", "tel", "mobile", "cell", "cellphone", "fax", "msisdn", "whatsapp"} or (
        "phone" in joined and not wset & {"iphone", "headphone", "headphones", "microphone"}
    ):
        return None if wset & _PHONE_NOT else "PHONE_NUMBER"
    if "ssn" in wset or joined in ("socialsecurity", "socialsecuritynumber", "socialsecurityno"):
        return "US_SSN"
    if "iban" in wset:
        return "IBAN_CODE"
    if joined in ("cardnumber", "creditcard", "creditcardnumber", "ccnumber", "cardno", "pan", "ccnum"):
        return "CREDIT_CARD"
    if wset & {"address", "addr", "street", "streetaddress"} or joined.startswith("addressline") or joined in ("line1", "line2"):
        return None if wset & _ADDRESS_NOT else "STREET_ADDRESS"
    if wset & _THING:
        return None
    if joined in _PERSON_KEYS:
        return "PERSON"
    if "name" in wset or "names" in wset:
        rest = wset - {"name", "names"}
        if not rest:
            return _WEAK_PERSON
        return "PERSON" if rest <= _PERSON_QUALIFIERS else None
    if len(words) <= 2 and wset <= _PERSON_ROLES | {"name", "full"}:
        return _WEAK_PERSON
    return None


_NAME_WORD = r"[^\W\d_]+(?:['’.-][^\W\d_]+)*\.?,?"
_NAME_VALUE = re.compile(rf"{_NAME_WORD}(?:[ \t]+{_NAME_WORD}){{0,4}}")
_EMAIL_SHAPE = re.compile(r"[\w.%+'-]+@[\w-]+(?:\.[\w-]+)+")
# a phone number as a cell holds one: "+" and digits, or groups of digits split by spaces, dots or
# dashes (a bare run of digits is an id; dates and IPv4 addresses are not phones)
_PHONE_SHAPE = re.compile(
    r"\+\d{7,15}|(?:(?:\+|00)\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{1,6}(?:[ .-]\d{1,6}){1,5}"
    r"(?:[ ]*(?:x|ext\.?|#)[ ]*\d{1,6})?"
)
_NOT_PHONE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}|\d{1,3}(?:\.\d{1,3}){3}|\d+\.\d+")


def _name_words(value: str) -> int:
    """How many words of a name ``value`` is (0: not name-shaped)."""
    if len(value) > 80 or not _NAME_VALUE.fullmatch(value):
        return 0
    return len(value.split())


def _digits(value: str) -> int:
    return sum(c.isdigit() for c in value)


def _value_ok(entity: str, value: str, person_beside: bool = False) -> str | None:
    """The type ``value`` is redacted as under a field that says ``entity``, or None when it does
    not look the part (see the module docstring)."""
    if value.strip().lower() in _PLACEHOLDERS or len(value) > 300:
        return None
    if entity == "PERSON":
        return "PERSON" if 1 <= _name_words(value) <= 5 else None
    if entity == _WEAK_PERSON:
        n = _name_words(value)
        return "PERSON" if 2 <= n <= 5 or (n == 1 and person_beside and value[:1].isalpha()) else None
    if entity == "EMAIL_ADDRESS":  # an address, or one spelled out ("jane dot doe at example dot com")
        spelled = "@" in value or " at " in value.lower() or "(at)" in value.lower() or "[at]" in value.lower()
        return entity if spelled and len(value) <= 120 and len(value.split()) <= 8 else None
    if entity in ("PHONE_NUMBER", "US_SSN"):
        return entity if _digits(value) >= 5 and len(value) <= 40 else None
    if entity in ("CREDIT_CARD", "IBAN_CODE"):
        return entity if _digits(value) >= 8 and len(value) <= 50 else None
    if entity == "STREET_ADDRESS":
        return entity if any(c.isalpha() for c in value) and len(value) <= 200 else None
    return None


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


# -- tables ---------------------------------------------------------------------------------------

_MD_RULE = re.compile(r"\s*:?-{2,}:?\s*")
# a rule line between a table's rows: psql's "-----+-----", a box's "+----+----+"
_RULE_LINE = re.compile(r"[ \t]*\+?-{3,}(?:\+-{3,})*\+?[ \t]*")
_CELL_MARKS = "*_`\"' "


@dataclass
class _Row:
    cells: list[tuple[int, int]]  # each cell's content (absolute offsets, trimmed)
    delim: str


def _split_csv(text: str, start: int, end: int, delim: str) -> list[tuple[int, int]] | None:
    """The cells of one CSV/TSV line ``text[start:end]`` (content offsets; a quoted cell's
    inside its quotes), or None when its quotes do not close."""
    cells = []
    i = start
    while True:
        j = i
        while j < end and text[j] == " ":
            j += 1
        if j < end and text[j] == '"':
            k = j + 1
            while True:
                k = text.find('"', k, end)
                if k < 0:
                    return None
                if k + 1 < end and text[k + 1] == '"':
                    k += 2
                    continue
                break
            cells.append((j + 1, k))
            nxt = text.find(delim, k + 1, end)
            if nxt < 0:
                if text[k + 1 : end].strip():
                    return None
                return cells
            if text[k + 1 : nxt].strip():
                return None
            i = nxt + 1
        else:
            nxt = text.find(delim, i, end)
            cells.append(_trimmed(text, i, end if nxt < 0 else nxt))
            if nxt < 0:
                return cells
            i = nxt + 1


def _split_md(text: str, start: int, end: int) -> list[tuple[int, int]]:
    a, b = _trimmed(text, start, end)
    if a < b and text[a] == "|":
        a += 1
    if b > a and text[b - 1] == "|" and (b - 2 < a or text[b - 2] != "\\"):
        b -= 1
    cells, i = [], a
    while True:
        j = text.find("|", i, b)
        while j > 0 and text[j - 1] == "\\":
            j = text.find("|", j + 1, b)
        cells.append(_trimmed(text, i, b if j < 0 else j))
        if j < 0:
            return cells
        i = j + 1


def _row(text: str, start: int, end: int) -> _Row | None:
    """One line read as a table row (its delimiter and cells), or None."""
    line = text[start:end]
    if "|" in line:
        cells = _split_md(text, start, end)
        if len(cells) >= 2:
            return _Row(cells, "|")
    for delim in ("\t", ";", ","):
        if delim in line:
            split = _split_csv(text, start, end, delim)
            if split is not None and len(split) >= 2:
                return _Row(split, delim)
    return None


def _tables(text: str) -> Iterator[list[_Row]]:
    """Runs of two or more lines read as rows with the same delimiter and cell count."""
    run: list[_Row] = []
    at = 0
    n = len(text)
    while at <= n:
        nl = text.find("\n", at)
        end = n if nl < 0 else nl
        stop = end - 1 if end > at and text[end - 1] == "\r" else end
        if _RULE_LINE.fullmatch(text, at, stop):  # a psql or box-drawing rule: inside the table
            if nl < 0:
                break
            at = nl + 1
            continue
        row = _row(text, at, stop) if stop > at else None
        if row is not None and run and (row.delim != run[0].delim or len(row.cells) != len(run[0].cells)):
            if len(run) >= 2:
                yield run
            run = []
        if row is None:
            if len(run) >= 2:
                yield run
            run = []
        else:
            run.append(row)
        if nl < 0:
            break
        at = nl + 1
    if len(run) >= 2:
        yield run


def _cell(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """A cell's value without the Markdown or quote marks around it."""
    a, b = span
    while a < b and text[a] in _CELL_MARKS:
        a += 1
    while b > a and text[b - 1] in _CELL_MARKS:
        b -= 1
    return a, b


# a header cell: a short label ("Full name", "Phone No.", "Amount (EUR)"), not data or code
_HEADER = re.compile(r"(?:[^\W\d]|#)[\w .#/()%&+-]{0,39}")


def _shape_of(value: str) -> str | None:
    if _EMAIL_SHAPE.fullmatch(value):
        return "EMAIL_ADDRESS"
    if _PHONE_SHAPE.fullmatch(value) and _digits(value) >= 7 and not _NOT_PHONE.fullmatch(value):
        return "PHONE_NUMBER"
    if 2 <= _name_words(value) <= 3:
        return "NAME"
    return None


def table_hints(text: str) -> list[Span]:
    """The cells of ``text``'s tables that are a type by their column (see the module
    docstring), as ``(entity, start, end)``."""
    if "\n" not in text or not ("," in text or "\t" in text or "|" in text or ";" in text):
        return []
    out: list[Span] = []
    for rows in _tables(text):
        rows = [r for r in rows if not (r.delim == "|" and all(_MD_RULE.fullmatch(text[a:b]) for a, b in r.cells))]
        if len(rows) < 2:
            continue
        ncols = len(rows[0].cells)
        first = [text[a:b] for a, b in (_cell(text, c) for c in rows[0].cells)]
        header = all(_HEADER.fullmatch(v) for v in first)
        data = rows[1:] if header else rows
        said = [field_entity(v) if header else None for v in first]
        shapes: list[str | None] = []
        for col in range(ncols):
            cells = [text[a:b] for a, b in (_cell(text, r.cells[col]) for r in data)]
            cells = [c for c in cells if c.strip().lower() not in _PLACEHOLDERS]
            kinds = [_shape_of(c) for c in cells]
            best = max(("EMAIL_ADDRESS", "PHONE_NUMBER", "NAME"), key=kinds.count)
            shapes.append(best if cells and kinds.count(best) >= COLUMN_SHARE * len(cells) else None)
        contact = any(s in ("EMAIL_ADDRESS", "PHONE_NUMBER") for s in shapes) or any(
            s in ("EMAIL_ADDRESS", "PHONE_NUMBER") for s in said
        )
        for col in range(ncols):
            # what the header says, else what most cells are (names only beside contact data)
            by_shape = (_WEAK_PERSON if contact else None) if shapes[col] == "NAME" else shapes[col]
            if by_shape == _WEAK_PERSON and (len(data) < 2 or (header and set(_words(first[col])) & _THING)):
                by_shape = None  # names by their shape: two rows or more, not under "Product"
            entities = [e for e in (said[col], by_shape) if e is not None]
            if not entities:
                continue
            for r in data:
                a, b = _cell(text, r.cells[col])
                got = next((g for e in entities if (g := _value_ok(e, text[a:b], person_beside=contact))), None)
                if got is not None and a < b:
                    out.append((got, a, b))
    return out


# -- JSON -----------------------------------------------------------------------------------------

_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+')
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(.))")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _parses(text: str) -> bool:
    s = text.lstrip()
    if not s or s[0] not in "{[":
        return False
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, (dict, list))


def is_json(text: str) -> bool:
    """Whether ``text`` is a JSON object or array (its first character after white space is
    ``{`` or ``[``, checked before anything is parsed)."""
    return _parses(text)


def json_unescape(raw: str) -> str | None:
    """The string a JSON string's content ``raw`` (between its quotes) stands for; None when it
    is not valid JSON string content."""
    try:
        value = json.loads('"' + raw + '"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def json_escape(value: str, ascii_only: bool = False) -> str:
    """``value`` as JSON string content (no quotes); non-ASCII characters as ``\\u`` escapes with
    ``ascii_only``. A string with nothing to escape comes back as it is."""
    return json.dumps(value, ensure_ascii=ascii_only)[1:-1]


def escaped_like(surrogate: str, target: int, ntok: Callable[[str], int]) -> str:
    """``surrogate`` as JSON string content for a value that was written with ``\\u`` escapes
    (Python's ``json.dumps`` writes ``José`` as ``Jos\\u00e9``, several tokens a character):
    non-ASCII characters escaped, and then, while its token count (``ntok``) is under the
    value's (``target``), a run of its letters escaped too (``\\u0061`` is ``a``: the string
    decodes to the surrogate all the same): the first run, shortest first, whose count is the
    value's, else the closest count found."""
    base = json_escape(surrogate, ascii_only=True)
    best, got = base, ntok(base)
    if got >= target:
        return best
    letters = [i for i, c in enumerate(surrogate) if c.isascii() and c.isalpha()]
    plain = [json_escape(c, ascii_only=True) for c in surrogate]
    for k in range(1, len(letters) + 1):
        over = True
        for first in range(len(letters) - k, -1, -1):  # runs nearer the end first
            chars = list(plain)
            for i in letters[first : first + k]:
                chars[i] = f"\\u{ord(surrogate[i]):04x}"
            candidate = "".join(chars)
            n = ntok(candidate)
            if n == target:
                return candidate
            if abs(n - target) < abs(got - target):
                best, got = candidate, n
            over = over and n > target
        if over:
            break
    return best


def _decode(raw: str) -> tuple[str, list[int] | None, list[int] | None]:
    """JSON string content -> (the string, the raw start and end of each of its characters), or
    (raw, None, None) when it holds no escape."""
    if "\\" not in raw:
        return raw, None, None
    out: list[str] = []
    lo: list[int] = []
    hi: list[int] = []
    at = 0
    matches = list(_ESCAPE.finditer(raw))
    i = 0
    while i < len(matches):
        m = matches[i]
        for j in range(at, m.start()):
            out.append(raw[j])
            lo.append(j)
            hi.append(j + 1)
        end = m.end()
        if m.group(1) is not None:
            cp = int(m.group(1), 16)
            nxt = matches[i + 1] if i + 1 < len(matches) else None
            if 0xD800 <= cp < 0xDC00 and nxt is not None and nxt.start() == end and nxt.group(1) is not None:
                low = int(nxt.group(1), 16)
                if 0xDC00 <= low < 0xE000:
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                    end = nxt.end()
                    i += 1
            ch = chr(cp)
        else:
            ch = _SIMPLE_ESCAPES.get(m.group(2), m.group(2))
        out.append(ch)
        lo.append(m.start())
        hi.append(end)
        at = end
        i += 1
    for j in range(at, len(raw)):
        out.append(raw[j])
        lo.append(j)
        hi.append(j + 1)
    return "".join(out), lo, hi


@dataclass
class _Leaf:
    kind: str  # "key", "string", "number"
    start: int  # content start in the text (after a string's opening quote)
    end: int  # content end (before its closing quote)
    key: str | None  # the key it stands under (an array's items: the array's key)
    obj: int  # the object it is a field of (-1: an array item or the top level)


def _json_leaves(text: str) -> tuple[list[_Leaf], dict[int, set[str]]] | None:
    """The leaves of a JSON text, in order, and each object's keys' :func:`field_entity` types;
    None when ``text`` is not a JSON object or array."""
    if not _parses(text):
        return None
    leaves: list[_Leaf] = []
    fields: dict[int, set[str]] = {}
    # each open container: [is an object, the key it stands under, its current key, expecting a key, id]
    stack: list[list] = []
    objects = 0
    for m in _JSON_TOKEN.finditer(text):
        tok = m.group()
        c = tok[0]
        top = stack[-1] if stack else None
        here = (top[2] if top[0] else top[1]) if top is not None else None
        if c == "{":
            stack.append([True, here, None, True, objects])
            fields[objects] = set()
            objects += 1
        elif c == "[":
            stack.append([False, here, None, False, -1])
        elif c in "}]":
            stack.pop()
        elif c == ":":
            if top is not None:
                top[3] = False
        elif c == ",":
            if top is not None and top[0]:
                top[3] = True
        elif c == '"':
            if top is not None and top[0] and top[3]:
                key = json_unescape(tok[1:-1]) or ""
                top[2] = key
                entity = field_entity(key)
                if entity is not None:
                    fields[top[4]].add(entity)
                leaves.append(_Leaf("key", m.start() + 1, m.end() - 1, None, top[4]))
            else:
                leaves.append(_Leaf("string", m.start() + 1, m.end() - 1, here, top[4] if top and top[0] else -1))
        elif c == "-" or c.isdigit():
            leaves.append(_Leaf("number", m.start(), m.end(), here, top[4] if top and top[0] else -1))
    return leaves, fields


# -- views ----------------------------------------------------------------------------------------


@dataclass
class View:
    """What the analyzer reads for a text, and how its offsets map back onto the text.

    ``text`` is the text itself (``lo`` None: offsets are the text's) or a JSON text's rendering
    (``lo[i]``, ``hi[i]``: where character ``i`` of the rendering starts and ends in the raw text;
    -1 for the glue between leaves and for keys, which nothing may change). ``hints`` are spans
    (in ``text``'s offsets) that are a type by their structure: a key's value, a table's cell."""

    text: str
    hints: list[Span] = field(default_factory=list)
    lo: list[int] | None = None
    hi: list[int] | None = None

    def to_raw(self, spans: Iterable[Span]) -> list[Span]:
        """``spans`` of :attr:`text` as spans of the raw text: split where they cross glue or a
        key, trimmed of white space, sorted."""
        if self.lo is None or self.hi is None:
            return sorted(spans, key=lambda s: s[1])
        lo, hi, text = self.lo, self.hi, self.text
        out: list[Span] = []
        for entity, start, end in spans:
            i = start
            while i < end:
                while i < end and (lo[i] < 0 or text[i].isspace()):
                    i += 1
                j = i
                while j < end and lo[j] >= 0:
                    j += 1
                k = j
                while k > i and text[k - 1].isspace():
                    k -= 1
                if k > i:
                    out.append((entity, lo[i], hi[k - 1]))
                i = j
        return sorted(set(out), key=lambda s: (s[1], -s[2]))


def _json_view(text: str, depth: int = 0) -> View | None:
    parsed = _json_leaves(text)
    if parsed is None:
        return None
    leaves, fields = parsed
    parts: list[str] = []
    lo: list[int] = []
    hi: list[int] = []
    hints: list[Span] = []
    size = 0
    after_key = False

    def glue(s: str) -> None:
        nonlocal size
        parts.append(s)
        lo.extend([-1] * len(s))
        hi.extend([-1] * len(s))
        size += len(s)

    for leaf in leaves:
        raw = text[leaf.start : leaf.end]
        if leaf.kind == "key":
            if after_key:
                glue("\n")
            glue((json_unescape(raw) or raw) + ": ")
            after_key = True
            continue
        after_key = False
        at = size
        if leaf.kind == "number":
            parts.append(raw)
            lo.extend(range(leaf.start, leaf.end))
            hi.extend(range(leaf.start + 1, leaf.end + 1))
            size += len(raw)
            entity = field_entity(leaf.key) if leaf.key else None
            if entity in ("PHONE_NUMBER", "US_SSN", "CREDIT_CARD") and _value_ok(entity, raw):
                hints.append((entity, at, size))
            glue("\n")
            continue
        value, dlo, dhi = _decode(raw)
        inner = _json_view(value, depth + 1) if depth < MAX_DEPTH and value.lstrip()[:1] in ("{", "[") else None
        if inner is not None and inner.lo is not None and inner.hi is not None:
            parts.append(inner.text)
            for a, b in zip(inner.lo, inner.hi):
                if a < 0:
                    lo.append(-1)
                    hi.append(-1)
                else:
                    lo.append(leaf.start + (dlo[a] if dlo else a))
                    hi.append(leaf.start + (dhi[b - 1] if dhi else b))
            hints.extend((e, at + s, at + t) for e, s, t in inner.hints)
            size += len(inner.text)
            glue("\n")
            continue
        parts.append(value)
        if dlo is None or dhi is None:
            lo.extend(range(leaf.start, leaf.end))
            hi.extend(range(leaf.start + 1, leaf.end + 1))
        else:
            lo.extend(leaf.start + x for x in dlo)
            hi.extend(leaf.start + x for x in dhi)
        size += len(value)
        entity = field_entity(leaf.key) if leaf.key else None
        if entity is not None:
            a, b = _trimmed(value, 0, len(value))
            beside = bool(fields.get(leaf.obj, set()) & {"EMAIL_ADDRESS", "PHONE_NUMBER", "STREET_ADDRESS"})
            got = _value_ok(entity, value[a:b], person_beside=beside) if a < b else None
            if got is not None:
                hints.append((got, at + a, at + b))
        hints.extend((e, at + s, at + t) for e, s, t in table_hints(value))
        glue("\n")
    return View("".join(parts), hints, lo, hi)


def view(text: str) -> View:
    """What the analyzer reads for ``text`` (see the module docstring): a JSON text's rendering,
    or the text itself, with the spans its structure says are PII."""
    if text.lstrip()[:1] in ("{", "["):
        got = _json_view(text)
        if got is not None:
            return got
    return View(text, table_hints(text))


def value_ranges(text: str) -> list[tuple[int, int]]:
    """Where a JSON text's string values (their content, between the quotes) and numbers lie,
    in order: what may be replaced in it (keys and the layout never are); [] when ``text`` is
    not JSON."""
    parsed = _json_leaves(text)
    return [(leaf.start, leaf.end) for leaf in parsed[0] if leaf.kind != "key"] if parsed else []


def span_values(text: str, spans: Sequence[Span]) -> Iterator[tuple[str, str]]:
    """``(entity, value)`` of each span of ``text``: a value inside a JSON string with escapes
    decoded (so that a name found in ``"Jos\\u00e9"`` is learned as ``José``)."""
    json_text: bool | None = None
    for entity, start, end in spans:
        value = text[start:end]
        if "\\" in value:
            if json_text is None:
                json_text = is_json(text)
            if json_text:
                value = json_unescape(value) or value
        yield entity, value
